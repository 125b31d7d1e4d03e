#!/usr/bin/env python3
"""scripts/make-cluster-credentials: what each form writes, its certificates' purposes
and names, and its refusals (usage errors exit 2, refusals 1, nothing half-written).
The TLS behaviour of these files is tested with real agents in tests/agent/e2e_test.cc
(Credentials.ANodesCertificateServesAsThatNodeOnly)."""
import os
import subprocess
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "make-cluster-credentials")


def run(*args):
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True)


def certificate_text(path):
    return subprocess.run(["openssl", "x509", "-in", path, "-noout", "-text"], capture_output=True, text=True,
                          check=True).stdout


def revoked_serials(folder):
    (name,) = os.listdir(os.path.join(folder, "crl"))
    text = subprocess.run(["openssl", "crl", "-in", os.path.join(folder, "crl", name), "-noout", "-text"],
                          capture_output=True, text=True, check=True).stdout
    return text.count("Serial Number:")


class MakeClusterCredentials(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.scratch.name, "creds")

    def tearDown(self):
        self.scratch.cleanup()

    def test_a_new_cluster_has_one_certificate_per_node_naming_its_hosts(self):
        made = run(self.dir, "--node", "a=10.0.0.2,node-a", "--node", "b")
        self.assertEqual(made.returncode, 0, made.stderr)
        self.assertEqual(sorted(os.listdir(self.dir)),
                         ["ca-db", "ca.key", "ca.pem", "crl", "head.key", "head.pem", "nodes", "token"])
        self.assertEqual(sorted(os.listdir(os.path.join(self.dir, "nodes"))), ["a.key", "a.pem", "b.key", "b.pem"])
        a = certificate_text(os.path.join(self.dir, "nodes", "a.pem"))
        self.assertIn("IP Address:10.0.0.2, DNS:node-a", a)
        self.assertIn("TLS Web Server Authentication", a)
        self.assertNotIn("Client Authentication", a)
        self.assertNotIn("127.0.0.1", a)  # a node's names only
        self.assertIn("DNS:b", certificate_text(os.path.join(self.dir, "nodes", "b.pem")))
        head = certificate_text(os.path.join(self.dir, "head.pem"))
        self.assertIn("TLS Web Client Authentication", head)
        self.assertNotIn("Server Authentication", head)
        self.assertEqual(os.stat(os.path.join(self.dir, "nodes", "a.key")).st_mode & 0o777, 0o600)
        self.assertEqual(revoked_serials(self.dir), 0)
        self.assertEqual([n for n in os.listdir(self.dir) if n.startswith(".")], [])  # no temporary left

    def test_nodes_are_added_and_certificates_revoked_with_the_same_ca(self):
        self.assertEqual(run(self.dir, "--node", "a=10.0.0.2").returncode, 0)
        with open(os.path.join(self.dir, "ca.pem")) as f:
            ca = f.read()
        added = run(self.dir, "--add-node", "c=10.0.0.4")
        self.assertEqual(added.returncode, 0, added.stderr)
        verified = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(self.dir, "ca.pem"),
                                   os.path.join(self.dir, "nodes", "c.pem")], capture_output=True, text=True)
        self.assertEqual(verified.returncode, 0, verified.stdout + verified.stderr)
        again = run(self.dir, "--add-node", "c=10.0.0.5")
        self.assertEqual(again.returncode, 1)
        self.assertIn("already exists; revoke it first", again.stderr)
        revoked = run(self.dir, "--revoke", "c")
        self.assertEqual(revoked.returncode, 0, revoked.stderr)
        self.assertEqual(revoked_serials(self.dir), 1)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "nodes", "c.key")))
        self.assertTrue(os.path.exists(os.path.join(self.dir, "nodes", "c.pem.revoked")))
        self.assertEqual(run(self.dir, "--revoke", "head").returncode, 0)
        self.assertEqual(revoked_serials(self.dir), 2)
        self.assertEqual(run(self.dir, "--new-head").returncode, 0)
        self.assertEqual(run(self.dir, "--add-node", "c=10.0.0.5").returncode, 0)  # a rebuilt node
        with open(os.path.join(self.dir, "ca.pem")) as f:
            self.assertEqual(f.read(), ca)

    def test_refusals_and_usage_errors(self):
        for args, code, words in [
            ((), 2, "missing DIR"),
            ((self.dir, "--node", "a=999.1.1.1?"), 2, "neither an IP address nor a DNS name"),
            ((self.dir, "--node", "head"), 2, "'head' names the head's certificate"),
            ((self.dir, "--node", "../x"), 2, "node name '../x' must be"),
            ((self.dir, "--node", "a", "--node", "a"), 2, "node a is given twice"),
            ((self.dir, "--revoke", "a", "--new-token"), 2, "one of --add-node"),
            ((self.dir, "--add-node", "a"), 1, "holds no cluster this script made"),
        ]:
            outcome = run(*args)
            self.assertEqual(outcome.returncode, code, (args, outcome.stderr))
            self.assertIn(words, outcome.stderr, args)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "ca.pem")))
        self.assertEqual(run(self.dir).returncode, 0)
        again = run(self.dir)
        self.assertEqual(again.returncode, 1)
        self.assertIn("pass --force to overwrite", again.stderr)
        self.assertEqual(run(self.dir, "--revoke", "nobody").returncode, 1)
        self.assertEqual(run(self.dir, "--force").returncode, 0)


if __name__ == "__main__":
    unittest.main()
