"""Client side of the tests of a secret read back in pieces, run inside
the sandbox with the system's python3.

    pieces.py ranges URL SIZE STEP [if-range]
        GETs URL in HTTP ranges of STEP bytes (Range: bytes=i-j, with
        If-Range when asked), writes what came back, put together, to
        /tmp/ranges, and prints each status
    pieces.py offsets URL SIZE STEP
        GETs URL?offset=i&len=STEP for each piece (pieces the application
        cuts), and writes them, put together, to /tmp/offsets
    pieces.py exfil URL FILE
        sends what FILE holds to URL in each form ordinary software
        writes a value in, in the body, a header and the query, and
        prints one line per try: "FORM PLACE STATUS BLOCKED-CODE"
"""

import base64
import json
import sys
import urllib.error
import urllib.parse
import urllib.request


def fetch(url, headers=None, data=None):
    req = urllib.request.Request(url, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.read(), None
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("X-Airlock-Blocked")


def ranges(url, size, step, if_range=""):
    size, step = int(size), int(step)
    got = b""
    for i in range(0, size, step):
        h = {"Range": "bytes=%d-%d" % (i, min(i + step, size) - 1)}
        if if_range:
            h["If-Range"] = '"%x"' % size
        status, body, _ = fetch(url, h)
        print("%d %d" % (i, status))
        if status == 206:
            got += body
        else:
            # A whole answer: keep the piece that was asked for.
            got += body[i : i + step]
    open("/tmp/ranges", "wb").write(got)


def offsets(url, size, step):
    size, step = int(size), int(step)
    got = b""
    for i in range(0, size, step):
        status, body, _ = fetch("%s?offset=%d&len=%d" % (url, i, step))
        if status != 200:
            print("offset %d: status %d" % (i, status))
            return
        got += body
    open("/tmp/offsets", "wb").write(got)
    print("got %d bytes" % len(got))


def forms(v):
    b = v.encode()
    return {
        "raw": v,
        "percent": urllib.parse.quote(v, safe=""),
        "json": json.dumps({"key": v}),
        "base64": base64.b64encode(b).decode(),
        "base64-nopad": base64.b64encode(b).decode().rstrip("="),
        "base64url": base64.urlsafe_b64encode(b).decode(),
        "base64-offset1": base64.b64encode(b"x" + b + b"!").decode(),
        "base64-offset2": base64.b64encode(b"xy" + b).decode(),
        "basic": "Basic " + base64.b64encode(b"user:" + b).decode(),
        "hex": b.hex(),
        "HEX": b.hex().upper(),
    }


def exfil(url, path):
    v = open(path).read()
    for name, f in forms(v).items():
        tries = [
            ("body", url, {}, f.encode()),
            ("header", url, {"X-Data": f}, None),
            ("query", url + "?d=" + urllib.parse.quote(f, safe=""), {}, None),
        ]
        for place, u, h, data in tries:
            status, _, code = fetch(u, h, data)
            print("%s %s %d %s" % (name, place, status, code))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {"ranges": ranges, "offsets": offsets, "exfil": exfil}[cmd](*args)


if __name__ == "__main__":
    main()
