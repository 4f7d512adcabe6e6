"""Unit tests of the fleet simulation's layout (fleet_layout.py). Run from the repository root:
python3 -m unittest discover -s scripts/load -p 'test_*.py' (scripts/ci/test.sh does)."""

import pathlib
import unittest

import fleet_layout

DEMO = (pathlib.Path(__file__).resolve().parents[2] / "config/demo-scenario.yaml").read_text()


class Placement(unittest.TestCase):
    def test_every_fault_the_job_and_the_slow_probe_get_nodes_of_their_own(self):
        for n in range(fleet_layout.MIN_NODES, 5001):
            layout = fleet_layout.place(n)
            nodes = list(layout.fault_at.values()) + layout.job_nodes + [layout.straggler_probe]
            self.assertEqual(len(nodes), len(set(nodes)), f"{n} nodes: {layout}")
            self.assertTrue(all(0 <= i < n for i in nodes), f"{n} nodes: {layout}")
            self.assertEqual(len(layout.job_nodes), 4)

    def test_too_few_nodes_are_refused_with_the_least_that_works(self):
        for n in (12, 20, 76, fleet_layout.MIN_NODES - 1):
            with self.assertRaisesRegex(ValueError, f"{fleet_layout.MIN_NODES} at least"):
                fleet_layout.place(n)

    def test_faulted_and_job_nodes_are_real_and_the_slow_probe_is_replayed(self):
        for n, wanted in ((100, 16), (1000, 16), (1000, 40), (92, 100)):
            layout = fleet_layout.place(n, wanted)
            self.assertTrue(set(layout.fault_at.values()) <= layout.real)
            self.assertTrue(set(layout.job_nodes) <= layout.real)
            self.assertNotIn(layout.straggler_probe, layout.real, "its probe figure is replayed")
            self.assertLessEqual(len(layout.real), max(wanted, 11), f"{n}, {wanted}")
        small = fleet_layout.place(92, 100)
        self.assertEqual(small.real, set(range(92)) - {small.straggler_probe}, "all real when few")


class Scenarios(unittest.TestCase):
    def test_the_quiet_node_keeps_none_of_the_demos_faults(self):
        quiet = fleet_layout.quiet_scenario(DEMO)
        for fault in ("temperature: 88\n", "memory_temperature: 94", "width: 8, width_max: 16",
                      "uncorrected: 1 }", "recovery_action: 1\n", "active: 96, supported: 511"):
            self.assertIn(fault, DEMO, "the demo changed: update quiet_scenario")
            self.assertNotIn(fault, quiet)

    def test_an_edit_changes_only_its_gpu(self):
        quiet = fleet_layout.quiet_scenario(DEMO)
        edited = fleet_layout.edit(quiet, 3, lambda block: block + "    lost: true\n")
        self.assertEqual(edited.count("lost: true"), quiet.count("lost: true") + 1)
        start, end = fleet_layout.device_block(edited, 3)
        self.assertIn("-000000000003\n", edited[start:end])
        self.assertIn("lost: true", edited[start:end])
        for other in (0, 2, 4, 7):
            s, e = fleet_layout.device_block(edited, other)
            self.assertEqual(edited[s:e], quiet[slice(*fleet_layout.device_block(quiet, other))])

    def test_each_node_has_ids_of_its_own_and_a_job_node_is_busy(self):
        quiet = fleet_layout.quiet_scenario(DEMO)
        busy = fleet_layout.busy_scenario(quiet)
        self.assertNotEqual(busy, quiet)
        self.assertIn("power_mw: 600000\n", busy)
        a, b = (fleet_layout.scenario_for(i, quiet, busy, [9]) for i in (7, 9))
        self.assertIn("GPU-5f2c7a1e-0007-", a)
        self.assertNotIn("GPU-5f2c7a1e-0000-", a)
        self.assertIn("GPU-5f2c7a1e-0009-", b)
        self.assertIn("power_mw: 600000\n", b)
        self.assertNotIn("power_mw: 600000\n", a)


if __name__ == "__main__":
    unittest.main()
