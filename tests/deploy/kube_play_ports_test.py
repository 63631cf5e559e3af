"""deploy/podman/kube_play.py's host ports: every containerPort of a release gets its own, even
where the kernel hands the same free port out twice (it may, once the socket that found it
closes, and every port is chosen before any pod binds one)."""
import os
import sys
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../deploy/podman"))
import kube_play  # noqa: E402


def deployment(name, *ports):
    return {"metadata": {"name": name}, "spec": {"template": {"spec": {"containers": [
        {"name": name, "ports": [{"containerPort": p} for p in ports]}]}}}}


class FakeSocket:
    """A socket whose bind(port 0) lands on the next port of `ports`."""
    def __init__(self, ports):
        self.ports = ports
        self.port = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def bind(self, address):
        self.port = next(self.ports)

    def getsockname(self):
        return ("127.0.0.1", self.port)


class LoopbackPortsTest(unittest.TestCase):
    def test_a_port_handed_out_twice_is_taken_once(self):
        ports = iter([40011, 40012, 40011, 40013, 40012, 40014])
        with mock.patch.object(kube_play.socket, "socket", lambda: FakeSocket(ports)):
            taken = set()
            drafter = kube_play.loopback_ports(deployment("drafter", 50051, 9090), taken)
            router = kube_play.loopback_ports(deployment("router", 8000, 9090), taken)
        hosts = list(drafter.values()) + list(router.values())
        self.assertEqual(hosts, ["127.0.0.1:40011", "127.0.0.1:40012", "127.0.0.1:40013",
                                 "127.0.0.1:40014"])
        self.assertEqual(taken, {40011, 40012, 40013, 40014})

    def test_real_ports_are_distinct(self):
        taken = set()
        published = [kube_play.loopback_ports(deployment(f"d{i}", 50051, 9090, 8000), taken)
                     for i in range(20)]
        hosts = [h for p in published for h in p.values()]
        self.assertEqual(len(hosts), 60)
        self.assertEqual(len(set(hosts)), 60)


if __name__ == "__main__":
    unittest.main()
