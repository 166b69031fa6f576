"""The listening-socket reader the slow tier measures a sweep with (devtools/sockets.py): it finds a process's
listening sockets and tells loopback from the rest."""
import os
import socket

from devtools.sockets import Listening, _address, listening_sockets, process_tree


def test_proc_net_addresses_are_decoded():
    assert _address("0100007F:1F90") == ("127.0.0.1", 8080)
    assert _address("00000000:0016") == ("0.0.0.0", 22)
    assert _address("0000000000000000FFFF00000100007F:9C40") == ("::ffff:127.0.0.1", 40000)
    assert _address("00000000000000000000000001000000:0050") == ("::1", 80)


def test_loopback_is_127_slash_8_and_1_and_their_ipv4_mapped_forms():
    def lo(address):
        return Listening(1, "p", address, 1).loopback

    assert lo("127.0.0.1") and lo("127.0.1.1") and lo("::1") and lo("::ffff:127.0.0.1")
    assert not lo("0.0.0.0") and not lo("::") and not lo("192.0.2.2") and not lo("::ffff:192.0.2.2")


def test_it_finds_this_processs_sockets_and_what_they_are_bound_to():
    with socket.socket() as lo, socket.socket(socket.AF_INET6) as anywhere:
        lo.bind(("127.0.0.1", 0))
        lo.listen()
        anywhere.bind(("::", 0))
        anywhere.listen()
        found = {s.port: s for s in listening_sockets(os.getpid()) if s.pid == os.getpid()}
        assert found[lo.getsockname()[1]].loopback
        assert found[anywhere.getsockname()[1]].address == "::" and not found[anywhere.getsockname()[1]].loopback
    assert os.getpid() in process_tree(os.getpid()) and os.getppid() not in process_tree(os.getpid())
