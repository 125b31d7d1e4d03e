#!/usr/bin/env python3
"""scripts/check-layering: the tree's includes point down the layers, and the check
refuses an include that points up or across (a worker file including the head's, a
planner file including generated gRPC code, a file in no known folder)."""
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CHECK = os.path.join(REPO, "scripts", "check-layering")


def run(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)


def tree(files):
    scratch = tempfile.TemporaryDirectory()
    for path, text in files.items():
        os.makedirs(os.path.join(scratch.name, os.path.dirname(path)), exist_ok=True)
        with open(os.path.join(scratch.name, path), "w") as f:
            f.write(text)
    return scratch


class Layering(unittest.TestCase):
    def test_the_repository_passes(self):
        result = run(REPO)
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_includes_down_the_layers_pass(self):
        with tree({"launcher/worker/train.cc": '#include "launcher/zero/engine.h"\n#include "planner/base/x.h"\n',
                   "launcher/head/launch.cc": '#include "agent/client/agent_client.h"\n',
                   "planner/cli/main.cc": '#include "launcher/head/head_commands.h"\n#include <vector>\n'}) as root:
            result = run(root)
            self.assertEqual(result.returncode, 0, result.stderr)

    def test_an_include_up_or_across_is_named_with_its_line(self):
        cases = {
            "launcher/worker/train.cc": ("launcher/head/launch_monitor.h", "launcher/worker/train.cc:2:"),
            "planner/search/search.cc": ("poplar/v1/agent.pb.h", "planner/search/search.cc:2:"),
            "planner/base/text_file.cc": ("planner/formats/profile.h", "planner/base/text_file.cc:2:"),
            "agent/node_job.cc": ("launcher/head/agent_job.h", "agent/node_job.cc:2:"),
            "launcher/zero/zero_engine.cc": ("launcher/worker/train.h", "launcher/zero/zero_engine.cc:2:"),
        }
        for path, (include, where) in cases.items():
            with self.subTest(path=path), tree({path: f'// a comment\n#include "{include}"\n'}) as root:
                result = run(root)
                self.assertEqual(result.returncode, 1)
                self.assertIn(where + " includes " + include, result.stderr)

    def test_a_file_in_no_known_folder_is_refused(self):
        with tree({"launcher/elsewhere/x.cc": "int x;\n"}) as root:
            result = run(root)
            self.assertEqual(result.returncode, 1)
            self.assertIn("launcher/elsewhere/x.cc: in no folder", result.stderr)


if __name__ == "__main__":
    unittest.main()
