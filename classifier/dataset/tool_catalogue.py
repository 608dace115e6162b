"""Tools (functions) as clients offer them to a model, for the tool-calling templates.

A request that lists functions (OpenAI `tools` JSON pasted in a system prompt, Python signatures,
a bulleted list, `<tools>` tags, or a sentence) and then asks for something one of them does is
answered with a call: a function name and its arguments, i.e. `structured`. The same list with
"implement this function" / "write a client for it" asks for `code`. The catalogue was written for
these templates (everyday services: smart home, music, parcels, reminders, recipes, rides ...);
no benchmark's functions or questions are used.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Callable

CITIES = ("Porto", "Nairobi", "Osaka", "Valparaíso", "Tallinn", "Calgary", "Hanoi", "Leeds", "Brno", "Perth", "Accra")
PEOPLE = ("Noor", "Dmitri", "Ines", "Kwame", "Mei", "Tobias", "Laila", "Ravi", "Solveig", "Jonah")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    params: tuple[tuple[str, str, str, bool], ...]  # (name, JSON type, description, required)
    asks: Callable[[random.Random], tuple[str, ...]]


def _n(rng: random.Random, low: int, high: int) -> int:
    return rng.randint(low, high)


TOOLS: tuple[Tool, ...] = (
    Tool("set_thermostat", "Set the target temperature of a room's thermostat.",
         (("room", "string", "room name", True), ("temperature", "number", "target in degrees", True), ("mode", "string", "heat, cool or auto", False)),
         lambda r: (f"Make the {r.choice(('bedroom', 'office', 'living room'))} {_n(r, 18, 24)} degrees.",
                    f"It's freezing in the kitchen, set it to {_n(r, 20, 23)}.", "Switch the nursery to auto at 21 degrees please.")),
    Tool("toggle_lights", "Turn lights on or off, optionally dimmed.",
         (("zone", "string", "which lights", True), ("on", "boolean", "on or off", True), ("brightness", "integer", "0-100", False)),
         lambda r: ("Turn off the porch lights.", f"Dim the hallway lights to {_n(r, 10, 60)} percent.", "Lights on in the garage.")),
    Tool("play_music", "Start playing music on a speaker.",
         (("query", "string", "artist, album, song or genre", True), ("speaker", "string", "speaker name", False), ("shuffle", "boolean", "shuffle", False)),
         lambda r: (f"Play some {r.choice(('jazz', 'Nina Simone', 'lo-fi beats', 'Bach cello suites'))} in the {r.choice(('kitchen', 'study'))}.",
                    "Put on my running playlist, shuffled.", "I want to hear Fleetwood Mac's Rumours.")),
    Tool("track_parcel", "Get the delivery status of a parcel.",
         (("tracking_number", "string", "carrier tracking number", True), ("carrier", "string", "carrier name", False)),
         lambda r: (f"Where is my package {r.choice(('1Z', 'JD', 'LX'))}{_n(r, 10**7, 10**8)}?", f"Has parcel {_n(r, 10**9, 10**10)} with DHL arrived yet?")),
    Tool("create_reminder", "Create a reminder at a date and time.",
         (("text", "string", "what to remember", True), ("when", "string", "ISO 8601 date-time", True)),
         lambda r: (f"Remind me to call {r.choice(PEOPLE)} tomorrow at {_n(r, 8, 11)}am.", "Remind me to water the plants every Sunday evening.",
                    f"Set a reminder for the {_n(r, 2, 28)}th: renew passport.")),
    Tool("set_timer", "Start a countdown timer.",
         (("minutes", "integer", "duration in minutes", True), ("label", "string", "timer name", False)),
         lambda r: (f"Timer for {_n(r, 3, 40)} minutes for the pasta.", "Start a 25 minute focus timer.")),
    Tool("find_recipes", "Search recipes by ingredients and diet.",
         (("ingredients", "array", "ingredients to use", True), ("diet", "string", "e.g. vegan, gluten-free", False), ("max_minutes", "integer", "cooking time", False)),
         lambda r: ("What can I cook with chickpeas, spinach and lemon?", f"Find a vegan dinner under {_n(r, 20, 45)} minutes with tofu.",
                    "Gluten-free dessert ideas using almonds and honey?")),
    Tool("book_ride", "Request a taxi or rideshare.",
         (("pickup", "string", "pickup address", True), ("dropoff", "string", "destination", True), ("seats", "integer", "passengers", False)),
         lambda r: (f"Get me a ride from {_n(r, 2, 300)} Elm Street to the central station for {_n(r, 1, 4)} people.",
                    f"I need a cab to the airport from my hotel in {r.choice(CITIES)}.")),
    Tool("reserve_table", "Reserve a table at a restaurant.",
         (("restaurant", "string", "restaurant name", True), ("party_size", "integer", "guests", True), ("time", "string", "date-time", True)),
         lambda r: (f"Book Casa Lupe for {_n(r, 2, 9)} on Saturday at 8pm.", f"Can you get us a table at Bento Bar tonight, {_n(r, 2, 5)} of us, around 7?")),
    Tool("get_showtimes", "List cinema showtimes for a film.",
         (("film", "string", "film title", True), ("city", "string", "city", True), ("date", "string", "YYYY-MM-DD", False)),
         lambda r: (f"When is Dune playing in {r.choice(CITIES)} on Friday?", f"Showtimes for the new Pixar film in {r.choice(CITIES)} tomorrow?")),
    Tool("get_balance", "Return the balance of a bank account.",
         (("account", "string", "checking, savings or card", True),),
         lambda r: ("How much is left in my savings account?", "What's my checking balance?")),
    Tool("transfer_money", "Transfer money between the user's accounts or to a contact.",
         (("amount", "number", "amount", True), ("to", "string", "account or contact", True), ("note", "string", "memo", False)),
         lambda r: (f"Send {_n(r, 10, 400)} to {r.choice(PEOPLE)} for the concert tickets.", f"Move {_n(r, 100, 2000)} from checking to savings.")),
    Tool("get_headlines", "Fetch top news headlines.",
         (("topic", "string", "news topic", False), ("country", "string", "ISO country code", False), ("limit", "integer", "how many", False)),
         lambda r: (f"What are the top {_n(r, 3, 10)} science headlines today?", "Any big news from Kenya this morning?")),
    Tool("define_word", "Look up a word in the dictionary.",
         (("word", "string", "word", True), ("language", "string", "language code", False)),
         lambda r: (f"What does '{r.choice(('petrichor', 'ubiquitous', 'sonder', 'liminal'))}' mean?", "Define 'Schadenfreude' in English.")),
    Tool("get_scores", "Get live or final scores of matches.",
         (("team", "string", "team name", True), ("sport", "string", "sport", False), ("date", "string", "YYYY-MM-DD", False)),
         lambda r: ("Did the Celtics win last night?", f"Score of the {r.choice(('Arsenal', 'Benfica', 'Boca Juniors'))} game?")),
    Tool("order_status", "Look up an order in the shop's system.",
         (("order_id", "string", "order number", True), ("email", "string", "customer email", False)),
         lambda r: (f"Customer asks: where is order #{_n(r, 10000, 99999)}?", f"Check the status of order A-{_n(r, 100, 999)} for jo@example.org.")),
    Tool("geocode", "Convert an address into latitude and longitude.",
         (("address", "string", "street address", True),),
         lambda r: (f"Coordinates of {_n(r, 1, 200)} Rua Augusta, Lisbon?", "Where exactly is the Eiffel Tower, in lat/long?")),
    Tool("local_time", "Current local time in a city.",
         (("city", "string", "city", True),),
         lambda r: (f"What time is it in {r.choice(CITIES)} right now?", f"Is it already evening in {r.choice(CITIES)}?")),
    Tool("log_workout", "Record a workout in the fitness log.",
         (("activity", "string", "e.g. run, swim", True), ("minutes", "integer", "duration", True), ("distance_km", "number", "distance", False)),
         lambda r: (f"Log a {_n(r, 3, 21)} km run that took {_n(r, 20, 120)} minutes.", f"I swam for {_n(r, 20, 60)} minutes today, note it.")),
    Tool("create_ticket", "Open an issue in the team's tracker.",
         (("title", "string", "short summary", True), ("priority", "string", "low, medium, high", False), ("assignee", "string", "user", False)),
         lambda r: (f"Open a high priority ticket: login page times out, assign it to {r.choice(PEOPLE).lower()}.", "File a bug that the export button does nothing on Safari.")),
    Tool("find_customer", "Search the CRM for a customer.",
         (("name", "string", "customer name", False), ("phone", "string", "phone number", False)),
         lambda r: (f"Pull up the customer record for {r.choice(PEOPLE)} Okafor.", f"Who owns the phone number +44 7700 {_n(r, 100000, 999999)}?")),
    Tool("route_distance", "Driving distance and time between two places.",
         (("origin", "string", "start", True), ("destination", "string", "end", True), ("avoid_tolls", "boolean", "avoid toll roads", False)),
         lambda r: (f"How far is {r.choice(CITIES)} from {r.choice(CITIES)} by car, without tolls?", "How long is the drive from Lyon to Geneva?")),
    Tool("nutrition_facts", "Nutrition facts for a food and amount.",
         (("food", "string", "food", True), ("grams", "number", "amount in grams", False)),
         lambda r: (f"How many calories in {_n(r, 50, 300)} g of cooked rice?", "Protein in two boiled eggs?")),
    Tool("check_book", "Check whether a library has a book available.",
         (("title", "string", "title", True), ("branch", "string", "library branch", False)),
         lambda r: ("Is 'The Left Hand of Darkness' available at the Eastside branch?", "Can I borrow Middlemarch this week?")),
    Tool("search_files", "Search the user's documents.",
         (("query", "string", "search terms", True), ("file_type", "string", "pdf, docx, ...", False), ("modified_after", "string", "date", False)),
         lambda r: ("Find the PDF invoices from last March.", "Where did I save the slides about the Q3 roadmap?")),
    Tool("shipping_quote", "Quote the price of shipping a package.",
         (("weight_kg", "number", "weight", True), ("from_country", "string", "origin", True), ("to_country", "string", "destination", True)),
         lambda r: (f"How much to ship {_n(r, 1, 20)} kg from Canada to Chile?", f"Quote for a {_n(r, 1, 5)} kg box from Poland to Japan.")),
)


def _schema(tool: Tool) -> dict:
    return {"type": "object",
            "properties": {p: ({"type": t, "items": {"type": "string"}} if t == "array" else {"type": t}) | {"description": d}
                           for p, t, d, _ in tool.params},
            "required": [p for p, _, _, req in tool.params if req]}  # fmt: skip


_PY_TYPES = {"string": "str", "number": "float", "integer": "int", "boolean": "bool", "array": "list[str]"}


def render_tools(rng: random.Random, tools: list[Tool]) -> str:
    """The tool list in one of the shapes clients paste it in."""
    style = rng.randrange(7)
    indent = rng.choice((None, 2))
    if style == 0:  # OpenAI `tools`
        return json.dumps([{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": _schema(t)}}
                           for t in tools], indent=indent)  # fmt: skip
    if style == 1:  # one JSON object per line
        return "\n".join(json.dumps({"name": t.name, "description": t.description, "parameters": _schema(t)}) for t in tools)
    if style == 2:  # <tools> tags around JSON
        body = "\n".join(json.dumps({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": _schema(t)}}) for t in tools)
        return f"<tools>\n{body}\n</tools>"
    if style == 3:  # Python signatures with a docstring
        return "\n\n".join(
            f"def {t.name}(" + ", ".join(f"{p}: {_PY_TYPES[ty]}" + ("" if req else " = None") for p, ty, _, req in t.params)
            + f') -> dict:\n    """{t.description}"""' for t in tools)  # fmt: skip
    if style == 4:  # bullets with signatures
        return "\n".join(f"- {t.name}(" + ", ".join(p for p, *_ in t.params) + f"): {t.description}" for t in tools)
    if style == 5:  # numbered, typed
        return "\n".join(f"{i}. {t.name}(" + ", ".join(f"{p}: {ty}" for p, ty, *_ in t.params) + f") - {t.description}"
                         for i, t in enumerate(tools, 1))  # fmt: skip
    return " ".join(f"There is a tool called {t.name} that takes " + ", ".join(p for p, *_ in t.params)
                    + f" ({t.description[0].lower()}{t.description[1:-1]})." for t in tools)  # fmt: skip


TOOL_HEADERS = (
    "You have access to the following tools:", "Available functions:", "You can call these functions:", "# Tools",
    "Tools you may use:", "You are a function-calling assistant. Functions:", "Here are the APIs you can use:",
    "You may invoke the following functions when needed:", "Functions:", "You are an assistant with tools.",
    "The following functions are available to you:", "## Available tools",
)  # fmt: skip
CALL_INSTRUCTIONS = (
    'To call a function, reply with {"name": <function name>, "arguments": <arguments object>}.',
    "Respond only with the function call(s), no other text.", "Return a JSON array of the calls to make.",
    "Answer with the call in the form function_name(arg=value, ...).", "If a function fits, call it. Do not answer in prose.",
    "Wrap each call in <tool_call></tool_call> tags.", "Output the function name and its arguments as JSON.",
    "Reply with the call to make and nothing else.", "Pick the right function and return it with its parameters filled in.",
)  # fmt: skip
REQUEST_LEADS = ("", "", "User: ", "The user says: ")
