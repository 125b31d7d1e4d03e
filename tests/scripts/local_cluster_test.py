#!/usr/bin/env python3
"""scripts/local_cluster.py: the built-in demo's text (scripts/demo, the README's first
command) comes from the repository's own docs where ../shared has no WikiText-2, as on
a fresh machine, whatever else docs/ holds (folders such as docs/results among it)."""
import os
import shutil
import sys
import tempfile
import unittest

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import local_cluster as lc  # noqa: E402


class DemoText(unittest.TestCase):
    def test_without_shared_data_the_docs_text_is_split_nine_tenths_to_one(self):
        with tempfile.TemporaryDirectory() as scratch:
            root = os.path.join(scratch, "repo")  # no ../shared beside it
            shutil.copytree(os.path.join(REPO, "docs"), os.path.join(root, "docs"))
            out = os.path.join(scratch, "out", "demo")  # made by corpora() (the benchmarks call it first)
            lc.ROOT, lc.OUT = root, out
            train, held_out = lc.corpora()
            with open(train) as f:
                train_text = f.read()
            with open(held_out) as f:
                held_out_text = f.read()
            with open(os.path.join(root, "docs", "architecture.md")) as f:
                self.assertIn(f.read()[:200], train_text)
            self.assertGreater(len(held_out_text), 0)
            self.assertAlmostEqual(len(train_text) / (len(train_text) + len(held_out_text)), 0.9, places=2)
            self.assertNotIn('"tokens_per_s"', train_text + held_out_text, "docs/results' JSON is not text")


if __name__ == "__main__":
    unittest.main()
