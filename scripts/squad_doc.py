#!/usr/bin/env python3
"""Writes a SQuAD article as a plain-text document (paragraphs joined by blank lines) and its first
N answerable questions, one per line. Standard library only; any python3 works.
Usage: squad_doc.py SQUAD.json DOC.txt QUESTIONS.txt [N]"""
import json
import sys

src, doc_path, q_path = sys.argv[1:4]
n = int(sys.argv[4]) if len(sys.argv) > 4 else 10
with open(src, encoding="utf-8") as f:
    article = json.load(f)["data"][0]
paragraphs = article["paragraphs"]
with open(doc_path, "w", encoding="utf-8") as f:
    f.write("\n\n".join(p["context"] for p in paragraphs) + "\n")
questions = [qa["question"] for p in paragraphs for qa in p["qas"] if not qa.get("is_impossible")]
with open(q_path, "w", encoding="utf-8") as f:
    f.write("\n".join(questions[:n]) + "\n")
