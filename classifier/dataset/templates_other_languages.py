"""Asks written in languages other than English: code, prose and structured alike.

The only non-English text the classifier saw was ChatterBot's small talk in a dozen languages, all
labelled prose, so a code ask in Chinese, Japanese, Korean, Spanish, German, Russian, Italian or
Portuguese read as prose (fresh check set i: 2 of 17 code asks right). These templates give every
class asks in nine languages, in the same voices, so the language itself stops deciding the class.
The tasks and topics are everyday programming chores and school subjects, written for this file.
"""

from __future__ import annotations

import random

from classifier.dataset.common import Template, phrase
from classifier.dataset.corpus import Corpus

PROGRAMMING_LANGUAGES = ("Python", "JavaScript", "TypeScript", "Go", "Rust", "Java", "C++", "C#", "Kotlin", "PHP",
                         "Ruby", "Bash")

# per language: ask frames for code ({pl} = a programming language, {task} = a chore in that language)
CODE_FRAMES = {
    "zh": (("用{pl}写一个函数，{task}。", "请帮我用{pl}实现{task}的代码。", "写一段{pl}代码：{task}。",
            "我需要一个{pl}脚本来{task}。", "能用{pl}写个程序{task}吗？", "{pl}怎么{task}？给我代码。"),
           ("把字符串里的单词顺序倒过来", "统计一个文本文件里每个单词出现的次数", "判断一个数是不是回文数",
            "合并两个已经排好序的数组", "读取CSV文件并算出某一列的平均值", "计算两个日期之间相差多少天",
            "把列表里的重复元素去掉", "生成一个十二位的随机密码", "每隔五秒检查一次网站是否在线")),
    "ja": (("{pl}で{task}関数を書いてください。", "{task}{pl}のコードを教えてください。",
            "{pl}を使って{task}プログラムを作ってください。", "{task}処理を{pl}で実装してほしいです。"),
           ("単語の順番を逆にする", "テキストファイルの単語の出現回数を数える", "回文かどうかを判定する",
            "二つのソート済み配列をマージする", "CSVを読んで列の平均を計算する", "ランダムなパスワードを生成する")),
    "ko": (("{pl}로 {task} 함수를 작성해 주세요.", "{task} {pl} 코드를 짜 주세요.",
            "{pl}를 사용해서 {task} 프로그램을 만들어 줘.", "{task} 기능을 {pl}로 구현해 줄래?"),
           ("문장의 단어 순서를 뒤집는", "파일에서 단어 빈도를 세는", "회문인지 판별하는", "정렬된 두 배열을 합치는",
            "CSV 파일의 평균을 계산하는", "무작위 비밀번호를 만드는")),
    "es": (("Escribe una función en {pl} que {task}.", "¿Puedes implementar en {pl} un programa que {task}?",
            "Necesito un script de {pl} que {task}.", "Hazme el código en {pl} para algo que {task}.",
            "¿Cómo se programa en {pl} algo que {task}? Dame el código."),
           ("ordene una lista de diccionarios por fecha", "cuente cuántas veces aparece cada palabra en un archivo",
            "detecte si un número es palíndromo", "fusione dos listas ordenadas", "lea un CSV y calcule la media de una columna",
            "genere una contraseña aleatoria de doce caracteres", "compruebe cada cinco segundos si una web responde")),
    "de": (("Schreibe eine {pl}-Funktion, die {task}.", "Implementiere in {pl} ein Programm, das {task}.",
            "Ich brauche ein {pl}-Skript, das {task}.", "Kannst du mir {pl}-Code geben, der {task}?",
            "Wie programmiere ich in {pl} etwas, das {task}? Bitte mit Code."),
           ("eine Liste von Wörterbüchern nach Datum sortiert", "zählt, wie oft jedes Wort in einer Datei vorkommt",
            "erkennt, ob eine Zahl ein Palindrom ist", "zwei sortierte Listen zusammenführt",
            "eine CSV-Datei liest und den Mittelwert einer Spalte berechnet", "ein zufälliges Passwort erzeugt")),
    "ru": (("Напиши функцию на {pl}, которая {task}.", "Реализуй на {pl} программу, которая {task}.",
            "Мне нужен скрипт на {pl}, который {task}.", "Как на {pl} сделать код, который {task}?"),
           ("сортирует список словарей по дате", "считает, сколько раз каждое слово встречается в файле",
            "проверяет, является ли число палиндромом", "объединяет два отсортированных списка",
            "читает CSV и считает среднее по столбцу", "генерирует случайный пароль")),
    "it": (("Scrivi una funzione in {pl} che {task}.", "Implementa in {pl} un programma che {task}.",
            "Mi serve uno script {pl} che {task}.", "Come faccio in {pl} un codice che {task}?"),
           ("ordini una lista di dizionari per data", "conti quante volte compare ogni parola in un file",
            "verifichi se un numero è palindromo", "unisca due liste ordinate", "generi una password casuale")),
    "pt": (("Escreva uma função em {pl} que {task}.", "Implemente em {pl} um programa que {task}.",
            "Preciso de um script em {pl} que {task}.", "Como faço em {pl} um código que {task}?"),
           ("ordene uma lista de dicionários por data", "conte quantas vezes cada palavra aparece num arquivo",
            "verifique se um número é palíndromo", "junte duas listas ordenadas", "gere uma senha aleatória")),
    "fr": (("Écris une fonction {pl} qui {task}.", "Implémente en {pl} un programme qui {task}.",
            "J'ai besoin d'un script {pl} qui {task}.", "Comment coder en {pl} quelque chose qui {task} ?"),
           ("trie une liste de dictionnaires par date", "compte combien de fois chaque mot apparaît dans un fichier",
            "vérifie si un nombre est un palindrome", "fusionne deux listes triées", "génère un mot de passe aléatoire")),
}  # fmt: skip

# the prose twin: explanations, essays, stories and advice in the same languages
PROSE_FRAMES = {
    "zh": (("请解释一下{topic}。", "{topic}是什么？用简单的话说明。", "写一篇关于{topic}的短文。", "你怎么看{topic}？",
            "给我讲讲{topic}的历史。", "为什么{topic}很重要？", "帮我写一封关于{topic}的邮件给同事。",
            "以{topic}为主题写一篇八百字的演讲稿。", "写一份关于{topic}的项目报告提纲，用段落回答。"),
           ("光合作用", "通货膨胀", "丝绸之路", "睡眠", "气候变化", "学习一门外语", "古罗马的兴衰", "城市里的绿地")),
    "ja": (("{topic}について説明してください。", "{topic}について短い文章を書いてください。", "{topic}とは何ですか？",
            "{topic}の歴史を教えてください。"),
           ("光合成", "インフレ", "江戸時代の文化", "睡眠の大切さ", "気候変動", "外国語の学び方")),
    "ko": (("{topic}에 대해 설명해 주세요.", "{topic}에 관한 짧은 글을 써 주세요.", "{topic}의 역사를 알려 줘.",
            "{topic}이 왜 중요한가요?"),
           ("광합성", "인플레이션", "조선 시대", "수면", "기후 변화", "외국어 공부")),
    "es": (("Explícame {topic}.", "Escribe un texto corto sobre {topic}.", "¿Qué opinas sobre {topic}?",
            "¿Por qué es importante {topic}?", "Cuéntame la historia de {topic}.",
            "Redacta un correo a mi jefe sobre {topic}."),
           ("la fotosíntesis", "la inflación", "la Ruta de la Seda", "el sueño", "el cambio climático", "el Imperio romano")),
    "de": (("Erkläre mir {topic}.", "Schreibe einen kurzen Text über {topic}.", "Was hältst du von {topic}?",
            "Warum ist {topic} wichtig?", "Erzähl mir etwas über die Geschichte von {topic}."),
           ("die Photosynthese", "die Inflation", "die Seidenstraße", "den Schlaf", "den Klimawandel", "das Römische Reich")),
    "ru": (("Объясни, что такое {topic}.", "Расскажи про {topic}.", "Почему {topic} так важен?",
            "Напиши короткое эссе на тему: {topic}."),
           ("фотосинтез", "инфляция", "Шёлковый путь", "сон", "изменение климата", "Римская империя")),
    "it": (("Spiegami {topic}.", "Scrivi un breve testo su {topic}.", "Perché è importante {topic}?",
            "Raccontami la storia di {topic}."),
           ("la fotosintesi", "l'inflazione", "la Via della Seta", "il sonno", "il cambiamento climatico")),
    "pt": (("Explique {topic}.", "Escreva um texto curto sobre {topic}.", "Por que {topic} é importante?",
            "Conte-me a história de {topic}."),
           ("a fotossíntese", "a inflação", "a Rota da Seda", "o sono", "a mudança climática")),
    "fr": (("Explique-moi {topic}.", "Écris un court texte sur {topic}.", "Pourquoi {topic} est-il important ?",
            "Raconte-moi l'histoire de {topic}."),
           ("la photosynthèse", "l'inflation", "la route de la soie", "le sommeil", "le changement climatique")),
}  # fmt: skip

# structured: lists and records asked for as JSON, YAML, CSV or a table ({fmt} in the ask's language)
STRUCTURED_FRAMES = {
    "zh": (("请用{fmt}格式列出{items}。", "把{items}整理成{fmt}。", "以{fmt}输出{items}，不要别的文字。"),
           ("JSON", "YAML", "CSV", "表格"), ("太阳系的行星和它们的卫星数量", "五种常见水果和它们的颜色", "一周七天的英文名称")),
    "ja": (("{items}を{fmt}形式で出力してください。", "{items}を{fmt}にまとめてください。"),
           ("JSON", "YAML", "CSV", "表"), ("太陽系の惑星と衛星の数", "五つの果物とその色", "日本の五大都市と人口")),
    "ko": (("{items}을 {fmt} 형식으로 출력해 주세요.", "{items}을 {fmt}로 정리해 줘."),
           ("JSON", "YAML", "CSV", "표"), ("태양계 행성과 위성 수", "다섯 가지 과일과 색깔")),
    "es": (("Dame {items} en formato {fmt}.", "Devuelve {items} como {fmt}, sin texto adicional.",
            "Organiza {items} en {fmt}."),
           ("JSON", "YAML", "CSV", "una tabla"), ("los planetas del sistema solar con su número de lunas",
                                                  "cinco frutas y sus colores", "los días de la semana en inglés")),
    "de": (("Gib mir {items} als {fmt}.", "Liste {items} im Format {fmt} auf, ohne weiteren Text."),
           ("JSON", "YAML", "CSV", "Tabelle"), ("die Planeten des Sonnensystems mit der Zahl ihrer Monde",
                                                "fünf Obstsorten und ihre Farben")),
    "ru": (("Выведи {items} в формате {fmt}.", "Оформи {items} как {fmt}, без пояснений."),
           ("JSON", "YAML", "CSV", "таблицы"), ("планеты Солнечной системы и число их спутников", "пять фруктов и их цвета")),
    "it": (("Dammi {items} in formato {fmt}.", "Elenca {items} come {fmt}, senza altro testo."),
           ("JSON", "YAML", "CSV", "tabella"), ("i pianeti del sistema solare con il numero di lune", "cinque frutti e i loro colori")),
    "pt": (("Me dê {items} em formato {fmt}.", "Liste {items} como {fmt}, sem texto extra."),
           ("JSON", "YAML", "CSV", "tabela"), ("os planetas do sistema solar com o número de luas", "cinco frutas e suas cores")),
    "fr": (("Donne-moi {items} au format {fmt}.", "Liste {items} en {fmt}, sans autre texte."),
           ("JSON", "YAML", "CSV", "tableau"), ("les planètes du système solaire avec leur nombre de lunes",
                                                "cinq fruits et leurs couleurs")),
}  # fmt: skip


def _code(rng: random.Random, corpus: Corpus) -> dict:
    frames, tasks = CODE_FRAMES[rng.choice(sorted(CODE_FRAMES))]
    return {"text": phrase(rng, frames).format(pl=rng.choice(PROGRAMMING_LANGUAGES), task=rng.choice(tasks))}


def _prose(rng: random.Random, corpus: Corpus) -> dict:
    frames, topics = PROSE_FRAMES[rng.choice(sorted(PROSE_FRAMES))]
    return {"text": phrase(rng, frames).format(topic=rng.choice(topics))}


def _structured(rng: random.Random, corpus: Corpus) -> dict:
    frames, formats, items = STRUCTURED_FRAMES[rng.choice(sorted(STRUCTURED_FRAMES))]
    return {"text": phrase(rng, frames).format(fmt=rng.choice(formats), items=rng.choice(items))}


TEMPLATES: tuple[Template, ...] = (
    Template("code/other_language", "code", _code, 60),
    Template("prose/other_language", "prose", _prose, 150),
    Template("structured/other_language", "structured", _structured, 30),
)
