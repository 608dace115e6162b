"""English glosses of the words other languages ask for code and data with.

The labelled prompts are English but for a few template phrasings, ChatterBot's small talk and
WritingBench's Chinese writing tasks, so what the model knows of a non-English ask is that it is
prose: "写一个Python函数" (write a Python function) read prose at 0.89, "Напиши функцию на Python"
at 0.97. The words that say what the reply is (function, script, implement, write, table) are few
in every language, so the ask's features also read their English glosses, in the order the words
occur ("写 ... 函数" adds "write function"): the weights learnt on English asks then apply. Only words
that name the same thing as the English word are listed (no "program", which is also a broadcast or
a curriculum, no 实现 "achieve", 类 or "clase" "kind", "cadena" "chain"); the model weighs a gloss as it weighs the English
word, so "la función del hígado" reads like "the function of the liver".

Latin and Cyrillic words are looked up whole (lower-cased); Chinese, Japanese and Korean ones, which
are not written with spaces, as substrings (only those whose first character occurs). Each gloss is read once per
ask; an English ask pays one translate and one split of at most 900 characters (~9 us).
"""

from __future__ import annotations

VERSION = 1   # recorded in a model's feature spec: the glosses it was fitted with

# gloss -> words (Latin / Cyrillic script, whole words, lower case)
_WORDS: dict[str, str] = {
    "function": "función funcion funciones fonction fonctions funktion funktionen funzione funzioni função funcao "
                "funções functie functies funkcja funkcję funkcji fonksiyon fonksiyonu функция функцию функции "
                "функций",
    "script": "skript skripte skrypt skryptu скрипт скрипта",
    "code": "código codigo códigos quellcode kod kodu код кода",
    "implement": "implementa implementar implementá implemente implementiere implementieren implémente "
                 "implémenter implementare zaimplementuj implementeer implementeren uygula реализуй реализуйте "
                 "реализовать",
    "write": "escribe escribir escríbeme écris écrivez écrire schreibe schreib schreiben scrivi scrivere escreva "
             "escreve escrever schrijf napisz napisać yaz напиши напишите написать",
    "algorithm": "algoritmo algorithme algorithmus algorytm algoritma algoritme алгоритм алгоритма",
    "table": "tabla tableau tabelle tabella tabela tablo таблица таблицу таблицы",
    "query": "consulta requête abfrage zapytanie sorgu запрос запроса",
    "array": "arreglo",
    "string": "zeichenkette",
}
# gloss -> substrings (Chinese, Japanese, Korean)
_SUBSTRINGS: dict[str, str] = {
    "function": "函数 函數 関数 함수",
    "code": "代码 代碼 コード 코드",
    "script": "脚本 スクリプト 스크립트",
    "programming": "编程 編程 プログラミング 프로그래밍",
    "implement": "実装 구현",
    "write": "写 寫 書いて 書く 작성",
    "algorithm": "算法 アルゴリズム 알고리즘",
    "regex": "正则表达式 正則表達式 正規表現 정규표현식 정규식",
    "array": "数组 陣列 配列 배열",
    "string": "字符串 文字列 문자열",
    "table": "表格 テーブル 표로 표를",
    "list": "列出 一覧 목록",
    "format": "格式 形式で 형식",
    "query": "查询 クエリ 쿼리",
}
_WORD_GLOSS = {word: gloss for gloss, words in _WORDS.items() for word in words.split()}
_SUBSTRING_GLOSS = [(term, gloss) for gloss, terms in _SUBSTRINGS.items() for term in terms.split()]
_FIRST_CHARS = frozenset(term[0] for term, _ in _SUBSTRING_GLOSS)
_PUNCTUATION = ".,;:!?¿¡()[]{}<>\"'`«»“”‘’/\\|*+=_#@$%^&~—–…，。、：；！？（）「」『』0123456789"
_TO_SPACE = str.maketrans({c: " " for c in _PUNCTUATION + "-"})


HEAD, TAIL = 600, 300   # where an ask says what it wants: its first and last characters


def glosses(text: str) -> str:
    """English glosses of the non-English ask words in `text` (lower-cased; its head and tail), in
    text order, or ""."""
    if len(text) > HEAD + TAIL:
        text = f"{text[:HEAD]}\n{text[-TAIL:]}"
    found: list[tuple[int, str]] = []
    if text.isascii():   # str.translate is fast on ASCII text only (~15 us at 1,500 characters)
        words = set(text.translate(_TO_SPACE).split())
    else:
        # strip each distinct word once (a 900-character ask repeats a third of its words), and test
        # the 43 first characters with `in` rather than building a set of the text's characters:
        # 36 -> 20 us on a 900-character ask
        words = {word.strip(_PUNCTUATION) for word in set(text.replace("-", " ").split())}
        present = [char for char in _FIRST_CHARS if char in text]
        for term, gloss in _SUBSTRING_GLOSS:
            if term[0] in present:
                at = text.find(term)
                if at >= 0:
                    found.append((at, gloss))
    for word in _WORD_GLOSS.keys() & words:
        found.append((text.find(word), _WORD_GLOSS[word]))
    return " ".join(gloss for _, gloss in sorted(found))
