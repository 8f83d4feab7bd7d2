"""The push connection pool against a raw socket receiver that misbehaves on purpose: kept-alive
connections reused, a connection the receiver closed while idle replaced without losing the
request, answers that end a connection, the total timeout and the address guard."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from zaqar_delay.push.connections import MAX_RESPONSE_BODY, ConnectionPool
from zaqar_delay.push.guard import AddressGuard, DeniedAddress
from zaqar_delay.push.webhook import WebhookSender

LOOPBACK = AddressGuard(deny=["0.0.0.0/0"], allow=["127.0.0.0/8"])
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"

# How one connection is served: given the socket and the receiver's record, until it returns.
Serve = Callable[[socket.socket, "RawReceiver"], None]


class RawReceiver:
    """Accepts connections on a loopback port and serves each with ``serve``; counts the
    connections and records each request it read."""

    def __init__(self, serve: Serve) -> None:
        self.serve = serve
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.closed = 0
        self.requests: list[bytes] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def run(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            self.serve(sock, self)
        except OSError:
            pass
        finally:
            sock.close()
            with self.lock:
                self.closed += 1

    def read_request(self, sock: socket.socket) -> bool:
        """Read one request (headers and Content-Length body); False at end of stream."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += sock.recv(65536)
        with self.lock:
            self.requests.append(body)
        return True


@contextmanager
def raw_receiver(serve: Serve) -> Iterator[RawReceiver]:
    receiver = RawReceiver(serve)
    thread = threading.Thread(target=receiver.run, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.listener.close()


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "the receiver never got there"
        time.sleep(0.01)


def keep_alive(answer: bytes = OK, requests: int = 1000) -> Serve:
    """Answer ``answer`` to up to ``requests`` requests on one connection, then close it."""

    def serve(sock: socket.socket, receiver: RawReceiver) -> None:
        for _ in range(requests):
            if not receiver.read_request(sock):
                return
            sock.sendall(answer)

    return serve


def test_one_connection_carries_request_after_request() -> None:
    with raw_receiver(keep_alive()) as receiver:
        pool = ConnectionPool(LOOPBACK, timeout_s=5, idle_per_origin=4)
        answers = [pool.post(receiver.url, f"{n}".encode(), {}).status for n in range(5)]
        assert answers == [200] * 5
        assert receiver.requests == [b"0", b"1", b"2", b"3", b"4"]
        assert receiver.connections == 1


def test_a_connection_the_receiver_closed_while_idle_is_replaced_and_the_request_sent_once() -> (
    None
):
    # Each connection answers one request, then the receiver closes it: as a receiver whose
    # keep-alive timeout ran out between two pushes.
    with raw_receiver(keep_alive(requests=1)) as receiver:
        pool = ConnectionPool(LOOPBACK, timeout_s=5, idle_per_origin=4)
        assert pool.post(receiver.url, b"first", {}).status == 200
        # The receiver has closed the kept connection by the time the next push goes out.
        wait_until(lambda: receiver.closed == 1)
        assert pool.post(receiver.url, b"second", {}).status == 200
        assert receiver.requests == [b"first", b"second"]
        assert receiver.connections == 2


def test_a_new_connection_that_fails_is_not_tried_again() -> None:
    def hang_up(sock: socket.socket, receiver: RawReceiver) -> None:
        receiver.read_request(sock)  # read, then close without answering

    with raw_receiver(hang_up) as receiver:
        pool = ConnectionPool(LOOPBACK, timeout_s=5, idle_per_origin=4)
        with pytest.raises(ConnectionError):
            pool.post(receiver.url, b"once", {})
        assert receiver.requests == [b"once"]
        outcome = WebhookSender(LOOPBACK, timeout_s=5).post(receiver.url, b"again", {})
        assert outcome.kind == "retry" and "connection failed" in outcome.error


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (MAX_RESPONSE_BODY + 1)
        + b"x" * (MAX_RESPONSE_BODY + 1),
    ],
    ids=["connection-close", "http-1.0", "body-over-the-limit"],
)
def test_an_answer_that_ends_or_overfills_the_connection_is_not_reused(answer: bytes) -> None:
    with raw_receiver(keep_alive(answer)) as receiver:
        pool = ConnectionPool(LOOPBACK, timeout_s=5, idle_per_origin=4)
        assert pool.post(receiver.url, b"1", {}).status == 200
        assert pool.post(receiver.url, b"2", {}).status == 200
        assert receiver.requests == [b"1", b"2"]
        assert receiver.connections == 2


def test_a_receiver_that_trickles_its_answer_times_out_in_total() -> None:
    # Every byte comes well within the timeout, the whole answer never does.
    stop = threading.Event()

    def trickle(sock: socket.socket, receiver: RawReceiver) -> None:
        receiver.read_request(sock)
        for byte in OK:
            if stop.wait(0.2):
                return
            sock.sendall(bytes([byte]))

    with raw_receiver(trickle) as receiver:
        pool = ConnectionPool(LOOPBACK, timeout_s=1, idle_per_origin=4)
        try:
            with pytest.raises(TimeoutError):
                pool.post(receiver.url, b"slow", {})
            assert receiver.requests == [b"slow"]
        finally:
            stop.set()


def test_the_guard_refuses_the_connected_address_before_anything_is_sent() -> None:
    with raw_receiver(keep_alive()) as receiver:
        pool = ConnectionPool(AddressGuard(deny=["127.0.0.0/8"]), timeout_s=5, idle_per_origin=4)
        with pytest.raises(DeniedAddress):
            pool.post(receiver.url, b"secret", {})
        assert receiver.requests == []


def test_not_an_http_url_is_refused() -> None:
    pool = ConnectionPool(LOOPBACK, timeout_s=5, idle_per_origin=4)
    with pytest.raises(ValueError):
        pool.post("ftp://127.0.0.1/hook", b"", {})


def test_idle_connections_over_every_receiver_are_bounded_longest_idle_closed_first() -> None:
    # One push to each of six receivers (a tenant may name any number of ports or hosts):
    # three connections are kept, and the receivers pushed first see theirs closed.
    with contextlib.ExitStack() as stack:
        receivers = [stack.enter_context(raw_receiver(keep_alive())) for _ in range(6)]
        pool = ConnectionPool(LOOPBACK, timeout_s=5, idle_per_origin=4, idle_kept=3)
        for receiver in receivers:
            assert pool.post(receiver.url, b"once", {}).status == 200
        assert pool.idle_connections() == 3
        wait_until(lambda: [r.closed for r in receivers] == [1, 1, 1, 0, 0, 0])
        # A kept one is still reused.
        assert pool.post(receivers[-1].url, b"again", {}).status == 200
        assert receivers[-1].connections == 1


def test_a_connection_idle_too_long_is_closed() -> None:
    with raw_receiver(keep_alive()) as receiver:
        pool = ConnectionPool(LOOPBACK, timeout_s=5, idle_per_origin=4, idle_s=0.2)
        assert pool.post(receiver.url, b"once", {}).status == 200
        wait_until(lambda: receiver.closed == 1)
        assert pool.idle_connections() == 0
        # The next push opens a new one.
        assert pool.post(receiver.url, b"later", {}).status == 200
        assert receiver.connections == 2
