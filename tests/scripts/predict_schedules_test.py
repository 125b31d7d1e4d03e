#!/usr/bin/env python3
"""scripts/gpu/predict-schedules: the cost model's prediction (poplar simulate --plan) set
against each measured schedule, the rounds of a schedule carried into the table, and
schedules.json files of runs before the rounds (no rounds_step_s) and failed schedules
read as they are. Needs the built `poplar` (POPLAR_BUILD_DIR, default build/)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "gpu"))
import gpu_runs  # noqa: E402

PREDICT = os.path.join(ROOT, "scripts", "gpu", "predict-schedules")
# A profile of the repository's (derived, not measured), standing in for one a GPU call brought back.
PROFILE = os.path.join(ROOT, "configs", "profiles", "gpt2-medium", "A100-80GB.json")


def schedule(stage, size, count, step_s, rounds=None):
    entry = {"stage": stage, "micro_batch": size, "count": count, "global_batch": size * count,
             "measured": {"step_s": step_s, "compute_s": step_s * 0.9, "optimizer_s": step_s * 0.1,
                          "communication_s": 0.0}}
    if rounds is not None:
        entry["rounds_step_s"] = rounds
    return entry


class PredictSchedules(unittest.TestCase):
    def setUp(self):
        self.results = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.results)
        # Named as the profile phase names its files: <device type>-<model>-<precision>.json.
        shutil.copyfile(PROFILE, os.path.join(self.results, "A100-80GB-gpt2-medium-bf16.json"))

    def predict(self, schedules):
        with open(os.path.join(self.results, "schedules.json"), "w") as f:
            json.dump({"model": "gpt2-medium", "precision": "bf16", "device_type": "A100-80GB", "steps": 10,
                       "warmup": 3, "rounds": 2, "complete": True, "schedules": schedules}, f)
        output = os.path.join(self.results, "prediction.json")
        run = subprocess.run([PREDICT, self.results, "--json", output], capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        with open(output) as f:
            return json.load(f), run.stdout, run.stderr

    def test_errors_are_the_prediction_against_the_measured_median_and_rounds_are_carried(self):
        document, printed, _ = self.predict([schedule(0, 4, 2, 0.30, rounds=[0.29, 0.31]),
                                             schedule(3, 8, 1, 0.50, rounds=[0.50, 0.55])])
        rows = document["schedules"]
        self.assertEqual([(r["stage"], r["micro_batch"], r["count"]) for r in rows], [(0, 4, 2), (3, 8, 1)])
        for row, measured in zip(rows, [0.30, 0.50]):
            self.assertEqual(row["measured_step_s"], measured)
            self.assertGreater(row["predicted_step_s"], 0)
            self.assertAlmostEqual(row["error"], row["predicted_step_s"] / measured - 1, places=12)
        self.assertEqual(rows[0]["rounds_step_s"], [0.29, 0.31])
        self.assertAlmostEqual(document["largest_error"], max(abs(r["error"]) for r in rows), places=12)
        # Each round in ms and their spread, largest over smallest.
        self.assertIn("290.0, 310.0 (6.9%)", printed)
        self.assertIn("500.0, 550.0 (10.0%)", printed)

    def test_a_schedule_of_a_run_before_the_rounds_and_a_failed_one(self):
        failed = {"stage": 0, "micro_batch": 512, "count": 1, "global_batch": 512, "failed": True}
        document, printed, stderr = self.predict([schedule(0, 8, 1, 0.25), failed])
        self.assertEqual(len(document["schedules"]), 1)
        self.assertNotIn("rounds_step_s", document["schedules"][0])
        self.assertEqual(gpu_runs.prediction_row(document["schedules"][0])[3], "-")
        self.assertIn("512 x 1 was not measured", stderr)


class RoundsText(unittest.TestCase):
    def test_one_round_has_no_spread(self):
        self.assertEqual(gpu_runs.rounds_text([0.0268]), "26.8")

    def test_the_spread_is_the_largest_over_the_smallest(self):
        self.assertEqual(gpu_runs.rounds_text([0.0268, 0.0239, 0.0250]), "26.8, 23.9, 25.0 (12.1%)")


if __name__ == "__main__":
    unittest.main()
