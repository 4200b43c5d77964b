"""Writes the corpus fixtures of pax/data/record_files_test.cc with writers
independent of paxcc: the `tfrecord` package (PyPI; its own tf.Example
protobuf and TFRecord framing, no TensorFlow) and Python's json and gzip.

    python3 -m pip install tfrecord
    python3 pax/data/testdata/make_corpus_fixtures.py

Files (in this directory):
  c4-mini.tfrecord-0000{0,1}-of-00002  tf.Examples with a 'text' bytes feature,
                                       a 'url' one and an int64 'length', as
                                       TFDS's c4 shards
  c4-mini.json.gz                      JSON lines {"text": ..., "url": ...}
  c4-mini-bad.jsonl                    a line without 'text', one not JSON
"""
import gzip
import json
import os

from tfrecord import TFRecordWriter

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = [
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9: text that is not ASCII.",
    "A line with \"quotes\", a tab\there and a backslash \\ too.",
    "",
    "The last document of the corpus.",
]


def write_tfrecords():
    half = (len(DOCS) + 1) // 2
    for shard, docs in enumerate([DOCS[:half], DOCS[half:]]):
        path = os.path.join(HERE, "c4-mini.tfrecord-%05d-of-00002" % shard)
        writer = TFRecordWriter(path)
        for i, text in enumerate(docs):
            writer.write({
                "url": ([("https://example.com/%d/%d" % (shard, i)).encode()], "byte"),
                "length": ([len(text)], "int"),
                "text": ([text.encode("utf-8")], "byte"),
            })
        writer.close()


def write_json_lines():
    with gzip.open(os.path.join(HERE, "c4-mini.json.gz"), "wt", encoding="utf-8") as f:
        for i, text in enumerate(DOCS):
            f.write(json.dumps({"url": "https://example.com/%d" % i, "text": text}) + "\n")
    with open(os.path.join(HERE, "c4-mini-bad.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"text": DOCS[0]}) + "\n")
        f.write(json.dumps({"content": "no text field here"}) + "\n")
        f.write("{not json\n")
        f.write(json.dumps({"text": DOCS[1]}) + "\n")


if __name__ == "__main__":
    write_tfrecords()
    write_json_lines()
