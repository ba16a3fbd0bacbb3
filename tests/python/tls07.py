#!/usr/bin/env python3
"""A Kafka 0.7 client written with nothing but Python's standard library (ssl, socket,
struct, zlib), for Tributary's TLS tests: an independent implementation of the wire format
and of the TLS handshake (OpenSSL, through Python's ssl module).

  tls07.py roundtrip HOST PORT TOPIC COUNT [TLS options]
      produces COUNT messages "<TOPIC>-<i>" to partition 0, then fetches from offset 0 until
      they are all back; prints each payload fetched, one per line. Exit 0 on success.
  tls07.py produce HOST PORT TOPIC FIRST COUNT [TLS options]
      sends messages "<TOPIC>-<FIRST>" .. "<TOPIC>-<FIRST+COUNT-1>" to partition 0 (0.7 PRODUCE:
      no answer); exit 0 once written.
  tls07.py fetch HOST PORT TOPIC [TLS options]
      fetches partition 0 from offset 0 (one FETCH of at most 1 MiB); prints each payload, or
      "error <code>" (exit 1) when the broker answers an error.
  tls07.py handshake HOST PORT [TLS options]
      completes a TLS handshake and one FETCH; prints "ok <protocol>" (exit 0) or
      "refused <reason>" (exit 3).
  tls07.py trickle HOST PORT SECONDS [TLS options]
      completes a TLS handshake, announces a 100-byte request and sends one byte of it every
      2 s; prints "cut off after <S> s" (exit 0) once the broker closes the connection, or
      "not cut off after SECONDS s" (exit 1).

TLS options: --plain (no TLS) --ca FILE --cert FILE --key FILE --max-version 1.0|1.1|1.2|1.3
"""
import socket
import ssl
import struct
import sys
import time
import zlib


def options(args):
    opts = {"plain": False, "ca": None, "cert": None, "key": None, "max": None}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--plain":
            opts["plain"] = True
            i += 1
            continue
        opts[{"--ca": "ca", "--cert": "cert", "--key": "key", "--max-version": "max"}[a]] = args[i + 1]
        i += 2
    return opts


def connect(host, port, opts):
    raw = socket.create_connection((host, port), timeout=10)
    if opts["plain"]:
        return raw
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = True
    if opts["ca"]:
        ctx.load_verify_locations(opts["ca"])
    if opts["cert"]:
        ctx.load_cert_chain(opts["cert"], opts["key"])
    if opts["max"]:
        version = {"1.0": ssl.TLSVersion.TLSv1, "1.1": ssl.TLSVersion.TLSv1_1,
                   "1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}[opts["max"]]
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        ctx.maximum_version = version
        if version < ssl.TLSVersion.TLSv1_2:
            # OpenSSL 3 refuses old protocols itself at the default security level: lower it,
            # so that it is the broker that refuses.
            ctx.set_ciphers("DEFAULT@SECLEVEL=0")
    return ctx.wrap_socket(raw, server_hostname=host)


def string(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def request(kind, body):
    payload = struct.pack(">h", kind) + body
    return struct.pack(">i", len(payload)) + payload


def message(payload):
    # magic 0: length, magic, crc32 of the payload, payload
    body = struct.pack(">bI", 0, zlib.crc32(payload) & 0xFFFFFFFF) + payload
    return struct.pack(">i", len(body)) + body


def read_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data


def fetch(sock, topic, offset):
    sock.sendall(request(1, string(topic) + struct.pack(">iqi", 0, offset, 1 << 20)))
    size = struct.unpack(">i", read_exactly(sock, 4))[0]
    body = read_exactly(sock, size)
    error = struct.unpack(">h", body[:2])[0]
    payloads, pos = [], 2
    while pos + 4 <= len(body):
        length = struct.unpack(">i", body[pos:pos + 4])[0]
        if pos + 4 + length > len(body):
            break
        magic = body[pos + 4]
        start = pos + 4 + (2 if magic == 1 else 1) + 4
        payloads.append(body[start:pos + 4 + length])
        pos += 4 + length
    return error, payloads


def send(sock, topic, payloads):
    messages = b"".join(message(p) for p in payloads)
    sock.sendall(request(0, string(topic) + struct.pack(">ii", 0, len(messages)) + messages))


def produce(host, port, topic, first, count, opts):
    sock = connect(host, port, opts)
    send(sock, topic, [f"{topic}-{i}".encode() for i in range(first, first + count)])
    # An OFFSETS request's answer shows the produce before it was read.
    sock.sendall(request(4, string(topic) + struct.pack(">iqi", 0, -1, 1)))
    size = struct.unpack(">i", read_exactly(sock, 4))[0]
    read_exactly(sock, size)
    return 0


def fetch_all(host, port, topic, opts):
    error, got = fetch(connect(host, port, opts), topic, 0)
    if error != 0:
        print(f"error {error}")
        return 1
    for p in got:
        print(p.decode())
    return 0


def roundtrip(host, port, topic, count, opts):
    sock = connect(host, port, opts)
    sent = [f"{topic}-{i}".encode() for i in range(count)]
    send(sock, topic, sent)
    deadline = time.time() + 10
    while True:
        error, got = fetch(sock, topic, 0)
        if error != 0:
            print(f"fetch error {error}", file=sys.stderr)
            return 1
        if len(got) >= count or time.time() > deadline:
            break
        time.sleep(0.05)
    for p in got:
        print(p.decode())
    return 0 if got[:count] == sent else 1


def handshake(host, port, opts):
    try:
        sock = connect(host, port, opts)
        # TLS 1.3 servers refuse a client certificate after the client's handshake has ended:
        # the refusal arrives with the first read.
        fetch(sock, "handshake-check", 0)
        print(f"ok {sock.version()}")
        return 0
    except (ssl.SSLError, ConnectionError, OSError) as e:
        print(f"refused {e}")
        return 3


def trickle(host, port, seconds, opts):
    sock = connect(host, port, opts)
    started = time.time()
    sock.sendall(struct.pack(">i", 100))
    sock.settimeout(2)
    while time.time() - started < seconds:
        try:
            if sock.recv(64) == b"":
                break
        except socket.timeout:
            pass
        except (ssl.SSLError, OSError):
            break
        try:
            sock.sendall(b"\0")
        except (ssl.SSLError, OSError):
            break
    else:
        print(f"not cut off after {seconds} s")
        return 1
    print(f"cut off after {time.time() - started:.1f} s")
    return 0


def main(argv):
    if argv[1] == "roundtrip":
        return roundtrip(argv[2], int(argv[3]), argv[4], int(argv[5]), options(argv[6:]))
    if argv[1] == "produce":
        return produce(argv[2], int(argv[3]), argv[4], int(argv[5]), int(argv[6]), options(argv[7:]))
    if argv[1] == "fetch":
        return fetch_all(argv[2], int(argv[3]), argv[4], options(argv[5:]))
    if argv[1] == "trickle":
        return trickle(argv[2], int(argv[3]), float(argv[4]), options(argv[5:]))
    if argv[1] == "handshake":
        return handshake(argv[2], int(argv[3]), options(argv[4:]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
