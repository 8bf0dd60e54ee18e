"""Client side of the egress tests, run inside the sandbox with the
system's python3: raw DNS questions, raw TCP and UDP, a WebSocket
handshake, and HTTP with urllib and http.client. Each command prints one
line (or a few) that the Go test reads; errors are printed, not raised,
where the test expects them.

    tool.py dns NAME TYPE [udp|tcp] [SERVER]
                                           rcode=N answers=N
    tool.py dnssend NAME TYPE SERVER       sends the question over UDP and
                                           does not wait for an answer
    tool.py resolve NAME [4|6]             the addresses, or "error: ..."
    tool.py tcp HOST PORT SEND [banner]    what came back, or how it ended
    tool.py udp HOST PORT DATA [reply]     sent, and the reply if asked
    tool.py ws HOST PATH MESSAGE [split]   the handshake and the echoed message
                                           (or the close frame); split sends
                                           the message in two fragments
    tool.py get URL [NAME=VALUE...]        urllib: status and body
    tool.py post URL BODY [NAME=VALUE...]  http.client: status, blocked code, body
    tool.py keepalive HOST PATH            two requests on one connection,
                                           the second after a line on stdin
"""

import base64
import hashlib
import http.client
import os
import random
import socket
import ssl
import struct
import sys
import urllib.error
import urllib.parse
import urllib.request

QTYPES = {"A": 1, "NULL": 10, "MX": 15, "TXT": 16, "AAAA": 28, "ANY": 255}
GATEWAY = "10.88.0.1"


def recvall(s, n):
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise EOFError("closed after %d of %d bytes" % (len(b), n))
        b += chunk
    return b


def dns(name, qtype, tcp=False, server=GATEWAY, wait=True):
    qid = random.randrange(65536)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", QTYPES[qtype], 1)
    if tcp:
        try:
            s = socket.create_connection((server, 53), timeout=10)
        except OSError as e:
            print("connect: %s" % e.__class__.__name__)
            return
        s.sendall(struct.pack(">H", len(q)) + q)
        n = struct.unpack(">H", recvall(s, 2))[0]
        r = recvall(s, n)
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(10)
        s.sendto(q, (server, 53))
        if not wait:
            print("sent")
            return
        r, _ = s.recvfrom(4096)
    rid, flags, _, an, _, _ = struct.unpack(">HHHHHH", r[:12])
    if rid != qid:
        print("error: answer id %d for question %d" % (rid, qid))
        return
    print("rcode=%d answers=%d" % (flags & 0xF, an))


def resolve(name, family=""):
    fam = {"4": socket.AF_INET, "6": socket.AF_INET6}.get(family, socket.AF_UNSPEC)
    try:
        infos = socket.getaddrinfo(name, None, fam, socket.SOCK_STREAM)
    except OSError as e:
        print("error: %s" % e)
        return
    print(" ".join(sorted({i[4][0] for i in infos})))


def tcp(host, port, send, banner=False):
    try:
        s = socket.create_connection((host, int(port)), timeout=20)
    except OSError as e:
        print("connect: %s" % e.__class__.__name__)
        return
    try:
        got = b""
        if banner:
            while not got.endswith(b"\n"):
                chunk = s.recv(100)
                if not chunk:
                    break
                got += chunk
            print("banner: %r" % got.decode())
        s.sendall(send.encode())
        want = len(send)
        got = b""
        while len(got) < want:
            chunk = s.recv(want - len(got))
            if not chunk:
                break
            got += chunk
        if got:
            print("echo: %r" % got.decode())
        else:
            print("closed")
    except OSError as e:
        print("reset: %s" % e.__class__.__name__)


def udp(host, port, data, reply=False):
    info = socket.getaddrinfo(host, int(port), 0, socket.SOCK_DGRAM)[0]
    s = socket.socket(info[0], socket.SOCK_DGRAM)
    s.settimeout(20)
    try:
        s.sendto(data.encode(), info[4])
    except OSError as e:
        print("send: %s" % e.__class__.__name__)
        return
    print("sent")
    if reply:
        got, _ = s.recvfrom(65535)
        print("reply: %r" % got.decode())


def ws(host, path, message, split=""):
    ctx = ssl.create_default_context()
    raw = socket.create_connection((host, 443), timeout=20)
    s = ctx.wrap_socket(raw, server_hostname=host)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(
        (
            "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, host, key)
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            raise EOFError("closed during the handshake")
        head += chunk
    lines = head.decode().split("\r\n")
    print("status: %s" % lines[0])
    accept = base64.b64encode(
        hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()
    ).decode()
    for line in lines[1:]:
        if line.lower().startswith("sec-websocket-accept:"):
            print("accept ok: %s" % (line.split(":", 1)[1].strip() == accept))
    # A text message in masked frames, as a client must send: one, or
    # two fragments.
    payload = message.encode()
    parts = [payload]
    if split == "split":
        parts = [payload[: len(payload) // 2], payload[len(payload) // 2 :]]
    for i, part in enumerate(parts):
        b0 = (0x80 if i == len(parts) - 1 else 0) | (0x1 if i == 0 else 0x0)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[j % 4] for j, b in enumerate(part))
        if len(part) < 126:
            head = bytes([b0, 0x80 | len(part)])
        else:
            head = bytes([b0, 0x80 | 126]) + struct.pack(">H", len(part))
        s.sendall(head + mask + masked)
    # The echo, whatever its fragments, or a close frame.
    data, opcode, masked_bits = b"", None, 0
    while True:
        try:
            b0, b1 = recvall(s, 2)
        except EOFError:
            print("closed")
            return
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", recvall(s, 2))[0]
        elif n == 127:
            n = struct.unpack(">Q", recvall(s, 8))[0]
        masked_bits |= b1 >> 7
        if b1 & 0x80:
            recvall(s, 4)  # a masking key: the server must not send one
        chunk = recvall(s, n)
        if b0 & 0x0F == 0x8:
            code = struct.unpack(">H", chunk[:2])[0] if len(chunk) >= 2 else 0
            print("close: code=%d reason=%r" % (code, chunk[2:].decode()))
            return
        if opcode is None:
            opcode = b0 & 0x0F
        data += chunk
        if b0 & 0x80:
            break
    print("frame: opcode=%d masked=%d %r" % (opcode, masked_bits, data.decode()))


def headers_of(args):
    h = {}
    for a in args:
        k, v = a.split("=", 1)
        h[k] = v
    return h


def get(url, *hdrs):
    req = urllib.request.Request(url, headers=headers_of(hdrs))
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            print("status: %d" % r.status)
            sys.stdout.write(r.read().decode())
    except urllib.error.HTTPError as e:
        print("status: %d" % e.code)
        print("blocked: %s" % e.headers.get("X-Airlock-Blocked"))
        sys.stdout.write(e.read().decode())


def post(url, body, *hdrs):
    u = urllib.parse.urlsplit(url)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    c = cls(u.hostname, u.port, timeout=20)
    h = {"Content-Type": "text/plain"}
    h.update(headers_of(hdrs))
    c.request("POST", u.path + ("?" + u.query if u.query else ""), body=body.encode(), headers=h)
    r = c.getresponse()
    print("status: %d" % r.status)
    print("blocked: %s" % r.getheader("X-Airlock-Blocked"))
    sys.stdout.write(r.read().decode())


def keepalive(host, path):
    c = http.client.HTTPSConnection(host, timeout=20)
    for i in range(2):
        if i == 1:
            sys.stdin.readline()
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        print("request %d: %d %s" % (i + 1, r.status, r.getheader("X-Airlock-Blocked")), flush=True)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "dns":
        server = args[3] if len(args) > 3 else GATEWAY
        dns(args[0], args[1], len(args) > 2 and args[2] == "tcp", server)
    elif cmd == "dnssend":
        dns(args[0], args[1], False, args[2], wait=False)
    elif cmd == "resolve":
        resolve(*args)
    elif cmd == "tcp":
        tcp(args[0], args[1], args[2], len(args) > 3 and args[3] == "banner")
    elif cmd == "udp":
        udp(args[0], args[1], args[2], len(args) > 3 and args[3] == "reply")
    elif cmd == "ws":
        ws(*args)
    elif cmd == "get":
        get(*args)
    elif cmd == "post":
        post(*args)
    elif cmd == "keepalive":
        keepalive(*args)
    else:
        sys.exit("unknown command " + cmd)


main()
