#!/usr/bin/env python3
"""mkvectors.py: writes alltypes.json and metadata.json, the shared wire test
vectors.

This is an independent encoder of the chanos wire format (docs/wire.md),
written from the spec alone. It holds a hand transcription of the layouts of
types.if and alltypes.if, and imports and runs no chanos code: the vectors
check the encoders and decoders that chanosc generates instead of echoing
them.

It also holds a small decoder, used only to check the vectors before writing
them: every good vector must decode back to its fields, and every malformed
one must fail with the error it names, whatever order a decoder does its
checks in (within what docs/wire.md fixes). A malformed vector that two
reasonable decoders could reject with different codes is a bug here.

metadata.json holds the metadata trailers of rpc calls (docs/wire.md,
"Metadata"), from an encoder and a decoder of that section alone, which
fixes the order of its checks.

Usage: python3 mkvectors.py [-check]   (from anywhere; stdlib only)
    writes alltypes.json and metadata.json beside this file; with -check,
    only checks that the files there are what this script would write.
"""

import itertools
import json
import os
import struct
import sys

# ---------------------------------------------------------------- wire format

HEADER_SIZE = 16
CALL, REPLY, ERROR, CANCEL = 0x01, 0x02, 0x04, 0x08
KIND_FLAGS = {"message": 0, "call": CALL, "reply": REPLY}
JSON_SAFE = 2**53  # integers whose magnitude exceeds this are written as strings


class WireError(Exception):
    """A rejection, with the error code of docs/wire.md."""

    def __init__(self, code, what=""):
        super().__init__(f"{code}: {what}")
        self.code = code


# ---------------------------------------------------------------- types
# A type is a tuple:
#   ("int", nbytes, signed)  ("bool",)  ("char",)  ("iref",)  ("cap",)
#   ("enum", (names...))  ("array", elem, n)  ("struct", ((name, type), ...))


def I(n, signed):
    return ("int", n, signed)


UINT8, UINT16, UINT32, UINT64 = I(1, False), I(2, False), I(4, False), I(8, False)
INT8, INT16, INT32, INT64 = I(1, True), I(2, True), I(4, True), I(8, True)
UINTPTR = SIZE = ERRVAL = UINT64  # always 64 bits on the wire
INTPTR = INT64
INT = INT32
BOOL, CHAR, IREF = ("bool",), ("char",), ("iref",)
CAP = GIVE_AWAY_CAP = ("cap",)  # same encoding; ownership differs


def enum(*names):
    return ("enum", names)


def array(elem, n):
    return ("array", elem, n)


def struct_(*fields):
    return ("struct", fields)


# types.if
COLOR = enum("red", "green", "blue")
POINT = struct_(("x", INT32), ("y", INT32))

# alltypes.if
WORD = UINT32                 # alias word uint32
STATUS = ERRVAL               # alias status errval
WORDREF = WORD                # typedef word wordref
GENPADDR = UINT64             # typedef uint64 genpaddr
POS = POINT                   # typedef point pos
POWER = enum("off", "on", "standby")
SINGLE = enum("lonely")
DIGEST = array(UINT8, 16)
TAG = array(CHAR, 4)
ROW = array(UINT16, 3)
MATRIX = array(ROW, 2)
SEGMENT = array(POINT, 2)
CAPSET = array(GIVE_AWAY_CAP, 2)
LINE = struct_(("from", POS), ("to", POINT), ("colour", COLOR), ("visible", BOOL))
RECORD = struct_(("type", UINT8), ("default", INT64), ("register", UINT16),
                 ("sum", DIGEST), ("seg", SEGMENT), ("state", POWER))
BINDING = struct_(("target", IREF), ("err", ERRVAL), ("grade", CHAR), ("delta", INT8))
HANDLE = struct_(("c", CAP), ("label", UINT16), ("g", GIVE_AWAY_CAP))

# ---------------------------------------------------------------- messages
# An argument is (dir, shape, name, type, max); dir is None, "in" or "out";
# shape is "scalar", "string" (type None) or "dyn" (dynamic array).


def S(name, t, d=None):
    return (d, "scalar", name, t, 0)


def STR(name, mx, d=None):
    return (d, "string", name, None, mx)


def DYN(name, t, mx, d=None):
    return (d, "dyn", name, t, mx)


MESSAGES = [  # (name, is_rpc, args), in declaration order: numbers 1, 2, ...
    ("empty", False, []),
    ("ping", True, []),
    ("uints", False, [S("u8", UINT8), S("u16", UINT16), S("u32", UINT32), S("u64", UINT64),
                      S("uptr", UINTPTR), S("sz", SIZE)]),
    ("sints", False, [S("i8", INT8), S("i16", INT16), S("i32", INT32), S("i", INT),
                      S("i64", INT64), S("iptr", INTPTR)]),
    ("misc", False, [S("flag", BOOL), S("ch", CHAR), S("err", ERRVAL), S("last", BOOL)]),
    ("irefs", False, [S("primary", IREF), S("sep", UINT8), S("backup", IREF)]),
    ("strings", False, [STR("short", 4), S("sep", UINT8), STR("long", 300)]),
    ("typedefs", False, [S("w", WORD), S("wr", WORDREF), S("gp", GENPADDR), S("st", STATUS),
                         S("p", POS)]),
    ("enums", False, [S("c", COLOR), S("pw", POWER), S("s", SINGLE)]),
    ("fixed_arrays", False, [S("d", DIGEST), S("t", TAG), S("m", MATRIX), S("seg", SEGMENT)]),
    ("structs", False, [S("pt", POINT), S("ln", LINE), S("rec", RECORD), S("b", BINDING)]),
    ("arrays", False, [DYN("bytes", UINT8, 8), DYN("words", UINT32, 4), DYN("pts", POINT, 3),
                       DYN("colors", COLOR, 4)]),
    ("more_arrays", False, [DYN("bits", BOOL, 5), DYN("chars", CHAR, 6), DYN("wide", INT64, 2),
                            DYN("sums", DIGEST, 2), DYN("lines", LINE, 2)]),
    ("caps", False, [S("c", CAP), S("g", GIVE_AWAY_CAP), S("between", UINT32),
                     S("pair", CAPSET), S("last", CAP)]),
    ("cap_arrays", False, [DYN("fds", CAP, 4), DYN("hs", HANDLE, 2), S("trailer", UINT8)]),
    ("echo", True, [S("seq", UINT32, "in"), STR("text", 32, "in"),
                    S("ack", UINT32, "out"), STR("reply", 32, "out")]),
    ("mixed", True, [S("a", UINT8, "in"), S("b", INT64, "out"), S("c", BOOL, "in"),
                     S("d", COLOR, "out"), DYN("pts", POINT, 2, "in"),
                     DYN("data", UINT8, 8, "out")]),
    ("notify", True, [S("event", UINT32, "in"), S("fd", GIVE_AWAY_CAP, "in"),
                      S("watch", CAP, "in")]),
    ("query", True, [S("counter", UINT64, "out"), STR("status_text", 16, "out"),
                     S("h", CAP, "out"), S("err", ERRVAL, "out")]),
    ("keywords", False, [S("type", UINT32), S("func", INT32), S("default", BOOL),
                         S("union", UINT8), S("select", INT16), S("register", UINT64),
                         STR("switch", 8), DYN("range", UINT8, 4)]),
    ("shadows", False, [S("len", UINT8), S("string", UINT16), S("nil", UINT32), S("err", INT8),
                        DYN("buf", UINT8, 4), STR("msg", 8), S("ctx", BOOL), S("b", INT64),
                        S("m", UINT32), S("i", UINT8), S("caps", CAP), S("off", UINT8),
                        S("p", UINT8), S("true", UINT8)]),
    ("goto", False, [S("case", UINT32), S("break", UINT8), S("continue", UINT8),
                     S("return", UINT8)]),
    ("tail", False, [S("id", UINT32), DYN("body", CHAR, 16), S("after", UINT16)]),
]
NUM = {name: i + 1 for i, (name, _, _) in enumerate(MESSAGES)}
BYNUM = {i + 1: m for i, m in enumerate(MESSAGES)}
MSG = {m[0]: m for m in MESSAGES}
N = len(MESSAGES)


def args_of(msg, kind):
    name, rpc, args = MSG[msg]
    if kind == "message":
        assert not rpc, msg
        return args
    assert rpc and kind in ("call", "reply"), (msg, kind)
    want = "in" if kind == "call" else "out"
    return [a for a in args if a[0] == want]


# ---------------------------------------------------------------- encoder


def u8(v):
    return struct.pack("<B", v)


def u16(v):
    return struct.pack("<H", v)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def enc_value(t, v, out, caps):
    k = t[0]
    if k == "int":
        assert isinstance(v, int) and not isinstance(v, bool), v
        out += v.to_bytes(t[1], "little", signed=t[2])  # OverflowError if out of range
    elif k == "bool":
        assert isinstance(v, bool), v
        out += u8(int(v))
    elif k == "char":
        assert isinstance(v, int) and 0 <= v <= 255, v
        out += u8(v)
    elif k == "iref":
        assert set(v) == {"machine", "export", "token"}, v
        tok = bytes.fromhex(v["token"])
        assert len(tok) == 16 and v["token"] == tok.hex(), v
        out += u64(v["machine"]) + u64(v["export"]) + tok
    elif k == "cap":
        # Canonical: the k-th cap met while encoding has index k.
        assert v == caps[0], f"cap {v} at position {caps[0]}"
        caps[0] += 1
        out += u32(v)
    elif k == "enum":
        if not isinstance(v, str) or v not in t[1]:
            raise WireError("enum", repr(v))
        out += u32(t[1].index(v))
    elif k == "array":
        assert len(v) == t[2], (t, v)
        for e in v:
            enc_value(t[1], e, out, caps)
    elif k == "struct":
        assert list(v) == [f for f, _ in t[1]], (t, v)
        for f, ft in t[1]:
            enc_value(ft, v[f], out, caps)
    else:
        raise AssertionError(t)


def enc_arg(arg, v, caps):
    _, shape, name, t, mx = arg
    out = bytearray()
    if shape == "scalar":
        enc_value(t, v, out, caps)
    elif shape == "string":
        b = v.encode("utf-8")
        if len(b) > mx:
            raise WireError("bound", name)
        if 0 in b:
            raise WireError("nul", name)
        out += u32(len(b)) + b
    else:
        if len(v) > mx:
            raise WireError("bound", name)
        out += u32(len(v))
        for e in v:
            enc_value(t, e, out, caps)
    return bytes(out)


def enc_parts(msg, kind, fields):
    """The body of msg/kind with these fields, as a list of per-argument
    byte strings, and the number of caps."""
    args = args_of(msg, kind)
    assert list(fields) == [a[2] for a in args], (msg, kind, list(fields))
    caps = [0]
    parts = [enc_arg(a, fields[a[2]], caps) for a in args]
    return parts, caps[0]


def frame(num, body=b"", flags=0, ncaps=0, call_id=0, timeout=0, size=None):
    if size is None:
        size = HEADER_SIZE + len(body)
    return struct.pack("<IHBBII", size, num, flags, ncaps, call_id, timeout) + bytes(body)


def encode(msg, kind, fields):
    parts, ncaps = enc_parts(msg, kind, fields)
    return frame(NUM[msg], b"".join(parts), KIND_FLAGS[kind], ncaps)


# ---------------------------------------------------------------- decoder
# Only for checking the vectors. A mode varies the order of checks where
# docs/wire.md leaves it open:
#   flags_first         header: flags/call_id/timeout before msg
#   via_generic         a typed decoder first runs the interface-wide header
#                       checks (msg known, flags fit its kind), then compares
#                       msg and kind with the ones asked for
#   static_ncaps_first  compare ncaps with the cap count before the body when
#                       the count is fixed (no dynamic array of caps)
#   fixed_len_first     compare the body length with a fixed-size body's
#                       length before reading any field
#   ncaps_before_trail  ncaps check before the trailing-bytes check
MODES = [dict(zip(("flags_first", "via_generic", "static_ncaps_first", "fixed_len_first", "ncaps_before_trail"), bits))
         for bits in itertools.product((False, True), repeat=5)]


class Reader:
    def __init__(self, buf, off):
        self.buf, self.off = buf, off

    def take(self, n, what):
        if len(self.buf) - self.off < n:
            raise WireError("truncated", what)
        b = self.buf[self.off:self.off + n]
        self.off += n
        return b


def dec_value(t, r, caps, what):
    k = t[0]
    if k == "int":
        return int.from_bytes(r.take(t[1], what), "little", signed=t[2])
    if k == "bool":
        b = r.take(1, what)[0]
        if b > 1:
            raise WireError("bool", what)
        return b == 1
    if k == "char":
        return r.take(1, what)[0]
    if k == "iref":
        b = r.take(32, what)
        return {"machine": int.from_bytes(b[0:8], "little"), "export": int.from_bytes(b[8:16], "little"),
                "token": b[16:32].hex()}
    if k == "cap":
        v = int.from_bytes(r.take(4, what), "little")
        if v != caps[0]:
            raise WireError("cap", f"{what}: index {v} at position {caps[0]}")
        caps[0] += 1
        return v
    if k == "enum":
        v = int.from_bytes(r.take(4, what), "little")
        if v >= len(t[1]):
            raise WireError("enum", what)
        return t[1][v]
    if k == "array":
        return [dec_value(t[1], r, caps, what) for _ in range(t[2])]
    if k == "struct":
        return {f: dec_value(ft, r, caps, f"{what}.{f}") for f, ft in t[1]}
    raise AssertionError(t)


def fixed_size(t):
    k = t[0]
    if k == "int":
        return t[1]
    return {"bool": 1, "char": 1, "iref": 32, "cap": 4, "enum": 4}.get(k) or (
        fixed_size(t[1]) * t[2] if k == "array" else sum(fixed_size(ft) for _, ft in t[1]))


def caps_in(t):
    k = t[0]
    if k == "cap":
        return 1
    if k == "array":
        return caps_in(t[1]) * t[2]
    if k == "struct":
        return sum(caps_in(ft) for _, ft in t[1])
    return 0


def decode(buf, msg, kind, mode):
    """Decodes one frame. msg None means an interface-wide decode (kind is
    then taken from the flags). Returns (msg, kind, fields)."""
    if len(buf) < HEADER_SIZE:
        raise WireError("truncated", "header")
    size, num, flags, ncaps, call_id, timeout = struct.unpack("<IHBBII", buf[:HEADER_SIZE])
    if size != len(buf):
        raise WireError("size")

    def in_order(check_msg, check_flags):
        if mode["flags_first"]:
            k = check_flags()
            check_msg()
        else:
            check_msg()
            k = check_flags()
        return k

    def check_ids(k):
        if k == "message" and call_id != 0:
            raise WireError("header", "call_id")
        if k != "call" and timeout != 0:
            raise WireError("header", "timeout_us")

    def generic_header():
        # What an interface-wide decoder checks: any frame the generated
        # decoders handle, of any message.
        def check_msg():
            if num == 0 or num > N:
                raise WireError("unknown_message")

        def check_flags():
            k = {0: "message", CALL: "call", REPLY: "reply"}.get(flags)
            if k is None:
                raise WireError("header", "flags")
            check_ids(k)
            return k

        k = in_order(check_msg, check_flags)
        m = BYNUM[num][0]
        if MSG[m][1] != (k != "message"):
            raise WireError("header", "flags do not fit a " + ("rpc" if MSG[m][1] else "message"))
        return m, k

    def typed_header():
        def check_msg():
            if num != NUM[msg]:
                raise WireError("unknown_message", "not the message asked for")

        def check_flags():
            if flags != KIND_FLAGS[kind]:
                raise WireError("header", "flags")
            check_ids(kind)
            return kind

        in_order(check_msg, check_flags)
        return msg, kind

    if msg is None:
        m, k = generic_header()
    else:
        if mode["via_generic"]:
            generic_header()
        m, k = typed_header()
    args = args_of(m, k)
    body = buf[HEADER_SIZE:]

    if mode["static_ncaps_first"] and all(a[1] != "dyn" or caps_in(a[3]) == 0 for a in args):
        if ncaps != sum(caps_in(a[3]) for a in args if a[1] == "scalar"):
            raise WireError("cap", "ncaps")
    if mode["fixed_len_first"] and all(a[1] == "scalar" for a in args):
        n = sum(fixed_size(a[3]) for a in args)
        if len(body) < n:
            raise WireError("truncated", "fixed body")
        if len(body) > n:
            raise WireError("trailing")

    r = Reader(buf, HEADER_SIZE)
    caps = [0]
    fields = {}
    for _, shape, name, t, mx in args:
        if shape == "scalar":
            fields[name] = dec_value(t, r, caps, name)
        elif shape == "string":
            n = int.from_bytes(r.take(4, name + " length"), "little")
            if n > mx:
                raise WireError("bound", name)
            b = r.take(n, name)
            if 0 in b:
                raise WireError("nul", name)
            fields[name] = b.decode("utf-8")
        else:
            n = int.from_bytes(r.take(4, name + " count"), "little")
            if n > mx:
                raise WireError("bound", name)
            fields[name] = [dec_value(t, r, caps, f"{name}[{i}]") for i in range(n)]

    def check_trailing():
        if r.off != len(buf):
            raise WireError("trailing")

    def check_ncaps():
        if ncaps != caps[0]:
            raise WireError("cap", "ncaps")

    if mode["ncaps_before_trail"]:
        check_ncaps()
        check_trailing()
    else:
        check_trailing()
        check_ncaps()
    return m, k, fields


# ---------------------------------------------------------------- good vectors

VECTORS = []  # (name, msg, kind, fields)


def good(msg, kind, label, /, **fields):
    # Python keywords (def, from, ...) cannot be keyword arguments: a field
    # named like one is passed with a trailing underscore.
    fields = {k[:-1] if k.endswith("_") else k: v for k, v in fields.items()}
    name = f"{msg}/{label}" if kind == "message" else f"{msg}/{kind}/{label}"
    VECTORS.append((name, msg, kind, fields))


U64MAX, I64MIN, I64MAX = 2**64 - 1, -2**63, 2**63 - 1
I32MIN, I32MAX, U32MAX = -2**31, 2**31 - 1, 2**32 - 1


def iref(machine, export, token):
    return {"machine": machine, "export": export, "token": token}


NULL_IREF = iref(0, 0, "00" * 16)
MAX_IREF = iref(U64MAX, U64MAX, "ff" * 16)
SEQ_TOKEN = "000102030405060708090a0b0c0d0e0f"


def pt(x, y):
    return {"x": x, "y": y}


def line(frm, to, colour, visible):
    return {"from": frm, "to": to, "colour": colour, "visible": visible}


def record(type_, default, register, sum_, seg, state):
    return {"type": type_, "default": default, "register": register, "sum": sum_, "seg": seg, "state": state}


def binding(target, err, grade, delta):
    return {"target": target, "err": err, "grade": grade, "delta": delta}


def handle(c, label, g):
    return {"c": c, "label": label, "g": g}


ZERO_LINE = line(pt(0, 0), pt(0, 0), "red", False)
ZERO_RECORD = record(0, 0, 0, [0] * 16, [pt(0, 0), pt(0, 0)], "off")
ZERO_BINDING = binding(NULL_IREF, 0, 0, 0)
MAX_LINE = line(pt(I32MAX, I32MIN), pt(I32MIN, I32MAX), "blue", True)
MAX_RECORD = record(255, I64MIN, 65535, [255] * 16, [pt(I32MAX, I32MAX), pt(I32MIN, I32MIN)], "standby")
MAX_BINDING = binding(MAX_IREF, U64MAX, 255, -128)

# empty, ping
good("empty", "message", "only")
good("ping", "call", "only")
good("ping", "reply", "only")

# uints
good("uints", "message", "zero", u8=0, u16=0, u32=0, u64=0, uptr=0, sz=0)
good("uints", "message", "max", u8=255, u16=65535, u32=U32MAX, u64=U64MAX, uptr=U64MAX, sz=U64MAX)
good("uints", "message", "byte_order", u8=0x12, u16=0x1234, u32=0x12345678, u64=0x0123456789ABCDEF,
     uptr=0xFEDCBA9876543210, sz=0x0102030405060708)
good("uints", "message", "high_bits", u8=0x80, u16=0x8000, u32=0x80000000, u64=2**63,
     uptr=0xFFFFFFFF00000000, sz=2**32)
good("uints", "message", "json_edge", u8=1, u16=256, u32=65536, u64=2**53, uptr=2**53 + 1, sz=2**53 - 1)

# sints
good("sints", "message", "zero", i8=0, i16=0, i32=0, i=0, i64=0, iptr=0)
good("sints", "message", "max", i8=127, i16=32767, i32=I32MAX, i=I32MAX, i64=I64MAX, iptr=I64MAX)
good("sints", "message", "min", i8=-128, i16=-32768, i32=I32MIN, i=I32MIN, i64=I64MIN, iptr=I64MIN)
good("sints", "message", "minus_one", i8=-1, i16=-1, i32=-1, i=-1, i64=-1, iptr=-1)
good("sints", "message", "mixed", i8=-2, i16=0x1234, i32=-0x12345678, i=1, i64=-(2**53), iptr=-(2**53) - 1)

# misc
good("misc", "message", "zero", flag=False, ch=0, err=0, last=False)
good("misc", "message", "max", flag=True, ch=255, err=U64MAX, last=True)
good("misc", "message", "mixed", flag=True, ch=ord("A"), err=0x8000000000000001, last=False)
good("misc", "message", "high_char", flag=False, ch=0x80, err=1, last=True)

# irefs
good("irefs", "message", "null", primary=NULL_IREF, sep=0, backup=NULL_IREF)
good("irefs", "message", "max", primary=MAX_IREF, sep=255, backup=MAX_IREF)
good("irefs", "message", "mixed", primary=iref(1, 2, SEQ_TOKEN), sep=0x5A,
     backup=iref(0x8000000000000000, 2**53 + 1, "f0e1d2c3b4a5968778695a4b3c2d1e0f"))

# strings
good("strings", "message", "empty", short="", sep=0, long="")
good("strings", "message", "ascii", short="ab", sep=7, long="hello, world")
good("strings", "message", "at_bound", short="abcd", sep=255, long="0123456789" * 30)
good("strings", "message", "utf8_at_bound", short="\u00e9\u00e9", sep=1, long="\u00e9" * 150)
good("strings", "message", "emoji", short="\U0001F642", sep=2,
     long="\u65e5\u672c\u8a9e \u00fc\u00df \u2603 \U0001F680 r\u00e9sum\u00e9")
good("strings", "message", "len_256", short="x", sep=3, long="y" * 255 + "z")
good("strings", "message", "specials", short="a\tb", sep=4,
     long="quote \" backslash \\ newline \n cr \r tab \t bell \x07 del \x7f slash /")

# typedefs
good("typedefs", "message", "zero", w=0, wr=0, gp=0, st=0, p=pt(0, 0))
good("typedefs", "message", "max", w=U32MAX, wr=U32MAX, gp=U64MAX, st=U64MAX, p=pt(I32MAX, I32MIN))
good("typedefs", "message", "mixed", w=1, wr=0xCAFEBABE, gp=0x00000001FFFFF000, st=0xDEADBEEF, p=pt(-1, 1))

# enums
good("enums", "message", "zero", c="red", pw="off", s="lonely")
good("enums", "message", "middle", c="green", pw="on", s="lonely")
good("enums", "message", "last", c="blue", pw="standby", s="lonely")

# fixed_arrays
good("fixed_arrays", "message", "zero", d=[0] * 16, t=[0] * 4, m=[[0] * 3, [0] * 3], seg=[pt(0, 0), pt(0, 0)])
good("fixed_arrays", "message", "max", d=[255] * 16, t=[255] * 4, m=[[65535] * 3, [65535] * 3],
     seg=[pt(I32MAX, I32MIN), pt(I32MIN, I32MAX)])
good("fixed_arrays", "message", "pattern", d=list(range(16)), t=[ord(c) for c in "CHAN"],
     m=[[1, 2, 3], [0x0100, 0x0200, 0x0300]], seg=[pt(-1, 1), pt(1000, -1000)])

# structs
good("structs", "message", "zero", pt=pt(0, 0), ln=ZERO_LINE, rec=ZERO_RECORD, b=ZERO_BINDING)
good("structs", "message", "max", pt=pt(I32MAX, I32MIN), ln=MAX_LINE, rec=MAX_RECORD, b=MAX_BINDING)
good("structs", "message", "mixed", pt=pt(3, -4),
     ln=line(pt(1, 2), pt(-3, -4), "green", True),
     rec=record(7, -2, 0x1234, list(range(0xF0, 0x100)), [pt(5, 6), pt(-7, -8)], "on"),
     b=binding(iref(9, 10, SEQ_TOKEN), 0x8000000000000000, ord("z"), -1))

# arrays
good("arrays", "message", "empty", bytes=[], words=[], pts=[], colors=[])
good("arrays", "message", "one_each", bytes=[0xAB], words=[0x01020304], pts=[pt(-1, 2)], colors=["green"])
good("arrays", "message", "at_bound", bytes=[0, 1, 127, 128, 254, 255, 0x55, 0xAA],
     words=[0, 1, 0x80000000, U32MAX], pts=[pt(0, 0), pt(I32MAX, I32MIN), pt(-5, 5)],
     colors=["red", "green", "blue", "blue"])
good("arrays", "message", "first_full_rest_empty", bytes=[9] * 8, words=[], pts=[], colors=[])
good("arrays", "message", "last_only", bytes=[], words=[], pts=[], colors=["blue"])

# more_arrays
good("more_arrays", "message", "empty", bits=[], chars=[], wide=[], sums=[], lines=[])
good("more_arrays", "message", "at_bound", bits=[True, False, True, True, False],
     chars=[0, ord("a"), ord("Z"), 0x7F, 0x80, 0xFF], wide=[I64MIN, I64MAX],
     sums=[list(range(16)), [255] * 16], lines=[ZERO_LINE, MAX_LINE])
good("more_arrays", "message", "partial", bits=[False], chars=[ord(c) for c in "hi"], wide=[-1],
     sums=[[0xA5] * 16], lines=[line(pt(1, 1), pt(2, 2), "green", True)])

# caps: c, g, pair[0], pair[1], last are always caps 0..4
good("caps", "message", "zero", c=0, g=1, between=0, pair=[2, 3], last=4)
good("caps", "message", "max", c=0, g=1, between=U32MAX, pair=[2, 3], last=4)

# cap_arrays
good("cap_arrays", "message", "empty", fds=[], hs=[], trailer=0)
good("cap_arrays", "message", "fds_only", fds=[0, 1], hs=[], trailer=1)
good("cap_arrays", "message", "handle_only", fds=[], hs=[handle(0, 7, 1)], trailer=2)
good("cap_arrays", "message", "at_bound", fds=[0, 1, 2, 3], hs=[handle(4, 0, 5), handle(6, 65535, 7)],
     trailer=255)

# echo
good("echo", "call", "zero", seq=0, text="")
good("echo", "call", "at_bound", seq=U32MAX, text="abcdefghijklmnopqrstuvwxyz012345")
good("echo", "call", "utf8_at_bound", seq=1, text="\u20ac" * 10 + "ab")
good("echo", "reply", "zero", ack=0, reply="")
good("echo", "reply", "at_bound", ack=U32MAX, reply="ABCDEFGHIJKLMNOPQRSTUVWXYZ543210")
good("echo", "reply", "utf8", ack=0x01020304, reply="gr\u00fc\u00df dich \U0001F44B")

# mixed
good("mixed", "call", "zero", a=0, c=False, pts=[])
good("mixed", "call", "at_bound", a=255, c=True, pts=[pt(I32MIN, I32MAX), pt(-1, -1)])
good("mixed", "call", "one", a=0x42, c=False, pts=[pt(1, 2)])
good("mixed", "reply", "zero", b=0, d="red", data=[])
good("mixed", "reply", "at_bound", b=I64MIN, d="blue", data=[1, 2, 3, 4, 5, 6, 7, 8])
good("mixed", "reply", "max", b=I64MAX, d="green", data=[255])

# notify
good("notify", "call", "zero", event=0, fd=0, watch=1)
good("notify", "call", "max", event=U32MAX, fd=0, watch=1)
good("notify", "reply", "empty")

# query
good("query", "call", "empty")
good("query", "reply", "zero", counter=0, status_text="", h=0, err=0)
good("query", "reply", "at_bound", counter=U64MAX, status_text="0123456789abcdef", h=0, err=U64MAX)
good("query", "reply", "utf8", counter=2**53 + 2, status_text="\u00e9tat: pr\u00eat", h=0, err=5)

# keywords
good("keywords", "message", "zero", type=0, func=0, default=False, union=0, select=0, register=0,
     switch="", range=[])
good("keywords", "message", "max", type=U32MAX, func=I32MIN, default=True, union=255, select=-32768,
     register=U64MAX, switch="default:", range=[1, 2, 3, 4])
good("keywords", "message", "mixed", type=7, func=-7, default=True, union=0x55, select=0x7FFF,
     register=0x0102030405060708, switch="case", range=[0xFF])

# shadows
good("shadows", "message", "zero", len=0, string=0, nil=0, err=0, buf=[], msg="", ctx=False, b=0, m=0,
     i=0, caps=0, off=0, p=0, true=0)
good("shadows", "message", "max", len=255, string=65535, nil=U32MAX, err=-128, buf=[1, 2, 3, 4],
     msg="12345678", ctx=True, b=I64MIN, m=U32MAX, i=255, caps=0, off=255, p=255, true=255)
good("shadows", "message", "distinct", len=1, string=2, nil=3, err=-4, buf=[5], msg="six", ctx=True,
     b=-7, m=8, i=9, caps=0, off=10, p=11, true=12)

# goto
good("goto", "message", "zero", case=0, break_=0, continue_=0, return_=0)
good("goto", "message", "mixed", case=0xA1B2C3D4, break_=1, continue_=2, return_=255)

# tail
good("tail", "message", "empty", id=0, body=[], after=0)
good("tail", "message", "at_bound", id=U32MAX, body=list(range(0xF0, 0x100)), after=65535)
good("tail", "message", "mixed", id=0x01020304, body=[ord(c) for c in "chanos"], after=0xBEEF)

# ---------------------------------------------------------------- decode-only
# Valid frames that an encoder never writes (generated encoders write
# call_id and timeout_us as 0): decoders must accept them.
DECODE_ONLY = []  # (name, msg, kind, fields, frame)


def decode_only(name, msg, kind, fields, call_id=0, timeout=0):
    parts, ncaps = enc_parts(msg, kind, fields)
    f = frame(NUM[msg], b"".join(parts), KIND_FLAGS[kind], ncaps, call_id, timeout)
    DECODE_ONLY.append((name, msg, kind, fields, f))


decode_only("ping/call/call_id_and_timeout", "ping", "call", {}, call_id=0xDEADBEEF, timeout=0xFFFFFFFF)
decode_only("echo/call/call_id", "echo", "call", {"seq": 5, "text": "hi"}, call_id=1, timeout=250000)
decode_only("echo/reply/call_id", "echo", "reply", {"ack": 5, "reply": "hi"}, call_id=0xFFFFFFFF)
decode_only("notify/call/call_id", "notify", "call", {"event": 1, "fd": 0, "watch": 1}, call_id=42, timeout=1)

# ---------------------------------------------------------------- unencodable
# Field values an encoder must refuse, with the code. An enum value given as
# a JSON number is a raw value that names no enumerator.
UNENCODABLE = []  # (name, msg, kind, fields, error)


def unencodable(name, msg, kind, error, /, **fields):
    UNENCODABLE.append((name, msg, kind, fields, error))


unencodable("strings/short_over_bound", "strings", "message", "bound", short="abcde", sep=0, long="")
unencodable("strings/short_over_bound_utf8", "strings", "message", "bound", short="\u00e9\u00e9a", sep=0, long="")
unencodable("strings/long_over_bound", "strings", "message", "bound", short="", sep=0, long="x" * 301)
unencodable("strings/nul", "strings", "message", "nul", short="a\x00b", sep=0, long="")
unencodable("echo/call/nul", "echo", "call", "nul", seq=0, text="\x00")
unencodable("echo/reply/over_bound", "echo", "reply", "bound", ack=0, reply="x" * 33)
unencodable("arrays/bytes_over_bound", "arrays", "message", "bound", bytes=[0] * 9, words=[], pts=[], colors=[])
unencodable("arrays/pts_over_bound", "arrays", "message", "bound", bytes=[], words=[], pts=[pt(0, 0)] * 4, colors=[])
unencodable("mixed/reply/data_over_bound", "mixed", "reply", "bound", b=0, d="red", data=[0] * 9)
unencodable("tail/body_over_bound", "tail", "message", "bound", id=0, body=[0] * 17, after=0)
unencodable("enums/color_3", "enums", "message", "enum", c=3, pw="off", s="lonely")
unencodable("enums/single_1", "enums", "message", "enum", c="red", pw="off", s=1)

# ---------------------------------------------------------------- malformed

MALFORMED = []  # (name, msg or None, kind, frame, error)


def bad(name, msg, kind, f, error):
    MALFORMED.append((name, msg, kind, bytes(f), error))


def with_size(f, size):
    return struct.pack("<I", size) + f[4:]


def cut(f, n):
    """The first n bytes of frame f, with size set to n: the only fault is
    that the body ends early."""
    return with_size(f[:n], n)


def patch(f, off, b):
    return f[:off] + b + f[off + len(b):]


def hdr(f, msg=None, flags=None, ncaps=None, call_id=None, timeout=None):
    f = bytearray(f)
    if msg is not None:
        f[4:6] = u16(msg)
    if flags is not None:
        f[6] = flags
    if ncaps is not None:
        f[7] = ncaps
    if call_id is not None:
        f[8:12] = u32(call_id)
    if timeout is not None:
        f[12:16] = u32(timeout)
    return bytes(f)


def body_frame(msg, kind, parts, ncaps=0):
    """A frame of msg/kind whose body is these raw parts, with this ncaps."""
    return frame(NUM[msg], b"".join(parts), KIND_FLAGS[kind], ncaps)


def good_frame(name):
    for n, msg, kind, fields in VECTORS:
        if n == name:
            return encode(msg, kind, fields)
    raise KeyError(name)


def good_parts(name):
    for n, msg, kind, fields in VECTORS:
        if n == name:
            return enc_parts(msg, kind, fields)
    raise KeyError(name)


EMPTY = good_frame("empty/only")
PING_CALL = good_frame("ping/call/only")
PING_REPLY = good_frame("ping/reply/only")
UINTS = good_frame("uints/byte_order")
SINTS = good_frame("sints/mixed")
STRINGS = good_frame("strings/ascii")
CAPS = good_frame("caps/max")

# -- truncated: the buffer ends inside the header or a field
bad("header/empty_buffer", None, "message", b"", "truncated")
bad("header/size_only", None, "message", EMPTY[:4], "truncated")
bad("header/15_bytes", "empty", "message", cut(EMPTY, 15), "truncated")
bad("header/15_bytes_size_16", "empty", "message", EMPTY[:15], "truncated")  # < 16 bytes: truncated, not size
bad("header/15_bytes_any", None, "message", cut(UINTS, 15), "truncated")
bad("uints/no_body", "uints", "message", cut(UINTS, 16), "truncated")
bad("uints/inside_u16", "uints", "message", cut(UINTS, 16 + 1 + 1), "truncated")
bad("uints/inside_u64", "uints", "message", cut(UINTS, 16 + 1 + 2 + 4 + 4), "truncated")
bad("uints/last_byte_missing", "uints", "message", cut(UINTS, len(UINTS) - 1), "truncated")
bad("sints/inside_i64", "sints", "message", cut(SINTS, len(SINTS) - 9), "truncated")
bad("irefs/inside_token", "irefs", "message", cut(good_frame("irefs/mixed"), 16 + 20), "truncated")
bad("strings/inside_length", "strings", "message", cut(STRINGS, 16 + 2), "truncated")
bad("strings/inside_bytes", "strings", "message", cut(STRINGS, 16 + 4 + 1), "truncated")
bad("strings/inside_long_bytes", "strings", "message", cut(STRINGS, len(STRINGS) - 3), "truncated")
bad("strings/long_length_missing", "strings", "message", cut(STRINGS, 16 + 4 + 2 + 1), "truncated")
bad("fixed_arrays/inside_matrix", "fixed_arrays", "message",
    cut(good_frame("fixed_arrays/pattern"), 16 + 16 + 4 + 7), "truncated")
bad("structs/inside_binding", "structs", "message",
    cut(good_frame("structs/mixed"), len(good_frame("structs/mixed")) - 2), "truncated")
ARR = good_frame("arrays/at_bound")
bad("arrays/inside_count", "arrays", "message", cut(ARR, 16 + 3), "truncated")
bad("arrays/between_elements", "arrays", "message", cut(ARR, 16 + 4 + 8 + 4 + 4 * 2), "truncated")
bad("arrays/inside_element", "arrays", "message", cut(ARR, 16 + 4 + 8 + 4 + 16 + 4 + 8 + 5), "truncated")
bad("arrays/count_without_elements", "arrays", "message",
    body_frame("arrays", "message", [u32(0), u32(0), u32(0), u32(2)]), "truncated")
bad("more_arrays/inside_lines", "more_arrays", "message",
    cut(good_frame("more_arrays/at_bound"), len(good_frame("more_arrays/at_bound")) - 10), "truncated")
bad("caps/inside_last", "caps", "message", cut(CAPS, len(CAPS) - 1), "truncated")
bad("echo/call/inside_text", "echo", "call", cut(good_frame("echo/call/at_bound"), 16 + 4 + 4 + 31), "truncated")
bad("echo/reply/inside_reply", "echo", "reply", cut(good_frame("echo/reply/utf8"), 16 + 4 + 4 + 5), "truncated")
bad("mixed/call/inside_pts", "mixed", "call", cut(good_frame("mixed/call/at_bound"), 16 + 1 + 1 + 4 + 8 + 4), "truncated")
bad("query/reply/no_body", "query", "reply", hdr(cut(good_frame("query/reply/zero"), 16), ncaps=1), "truncated")

TD = good_frame("typedefs/max")
bad("typedefs/inside_pos", "typedefs", "message", cut(TD, len(TD) - 5), "truncated")
GOTO = good_frame("goto/mixed")
bad("goto/no_body", "goto", "message", cut(GOTO, 16), "truncated")

# -- size: the size field differs from the buffer length
bad("size/one_more", "uints", "message", with_size(UINTS, len(UINTS) + 1), "size")
bad("size/one_less", "uints", "message", with_size(UINTS, len(UINTS) - 1), "size")
bad("size/zero", "empty", "message", with_size(EMPTY, 0), "size")
bad("size/below_header", "empty", "message", with_size(EMPTY, 15), "size")
bad("size/max", None, "message", with_size(EMPTY, U32MAX), "size")
bad("size/extra_byte_not_counted", "strings", "message", STRINGS + b"\x00", "size")
bad("size/truncated_body_not_counted", "strings", "message", STRINGS[:-1], "size")
bad("size/any_message", None, "message", with_size(SINTS, len(SINTS) + 256), "size")

# -- trailing: bytes after the last argument
bad("empty/trailing_byte", "empty", "message", frame(NUM["empty"], b"\x00"), "trailing")
bad("empty/trailing_bytes_any", None, "message", frame(NUM["empty"], b"\x01\x02\x03\x04"), "trailing")
bad("uints/trailing_byte", "uints", "message", with_size(UINTS + b"\x00", len(UINTS) + 1), "trailing")
bad("strings/trailing_byte", "strings", "message", with_size(STRINGS + b"!", len(STRINGS) + 1), "trailing")
bad("arrays/extra_element", "arrays", "message",
    body_frame("arrays", "message", [u32(0), u32(0), u32(0), u32(1) + u32(1) + u32(2)]), "trailing")
bad("ping/call/trailing_byte", "ping", "call", frame(NUM["ping"], b"\x00", CALL), "trailing")
bad("notify/reply/trailing_byte", "notify", "reply", frame(NUM["notify"], b"\x00", REPLY), "trailing")
bad("query/call/trailing_byte", "query", "call", frame(NUM["query"], b"\xff", CALL), "trailing")
bad("caps/trailing_byte", "caps", "message", with_size(CAPS + b"\x00", len(CAPS) + 1), "trailing")

bad("typedefs/trailing_byte", "typedefs", "message", with_size(TD + b"\x00", len(TD) + 1), "trailing")
bad("goto/trailing_bytes", "goto", "message", with_size(GOTO + b"\x01\x00", len(GOTO) + 2), "trailing")
TAIL = good_frame("tail/mixed")
bad("tail/inside_count", "tail", "message", cut(TAIL, 16 + 4 + 2), "truncated")
bad("tail/inside_after", "tail", "message", cut(TAIL, len(TAIL) - 1), "truncated")
bad("tail/count_past_end", "tail", "message",
    body_frame("tail", "message", [u32(1), u32(7) + b"chanos", u16(0)]), "truncated")
bad("tail/count_short_of_end", "tail", "message",
    body_frame("tail", "message", [u32(1), u32(5) + b"chanos", u16(0)]), "trailing")
bad("tail/trailing_byte", "tail", "message", with_size(TAIL + b"\x00", len(TAIL) + 1), "trailing")
bad("tail/body_bound_plus_1", "tail", "message",
    body_frame("tail", "message", [u32(1), u32(17) + bytes(17), u16(0)]), "bound")
bad("tail/ncaps_1", "tail", "message", hdr(TAIL, ncaps=1), "cap")
IR = good_frame("irefs/null")
bad("irefs/trailing_byte", "irefs", "message", with_size(IR + b"\x00", len(IR) + 1), "trailing")

# -- unknown_message
bad("unknown/zero", None, "message", hdr(EMPTY, msg=0), "unknown_message")
bad("unknown/n_plus_1", None, "message", hdr(EMPTY, msg=N + 1), "unknown_message")
bad("unknown/ffff", None, "message", hdr(EMPTY, msg=0xFFFF), "unknown_message")
bad("unknown/n_plus_1_call", None, "call", hdr(PING_CALL, msg=N + 1), "unknown_message")
bad("unknown/zero_typed", "empty", "message", hdr(EMPTY, msg=0), "unknown_message")
bad("unknown/n_plus_1_typed", "uints", "message", hdr(UINTS, msg=N + 1), "unknown_message")
# A valid frame of another message, of the same kind (a frame of another
# kind would be rejected with header by a decoder that checks flags first).
bad("unknown/other_rpc_reply_same_body", "notify", "reply", PING_REPLY, "unknown_message")
bad("unknown/other_rpc_call_same_body", "query", "call", PING_CALL, "unknown_message")
bad("unknown/echo_call_to_mixed", "mixed", "call", good_frame("echo/call/zero"), "unknown_message")
bad("unknown/mixed_reply_to_echo", "echo", "reply", good_frame("mixed/reply/at_bound"), "unknown_message")
bad("unknown/sints_to_uints", "uints", "message", SINTS, "unknown_message")
bad("unknown/uints_to_sints", "sints", "message", UINTS, "unknown_message")
bad("unknown/goto_to_empty", "empty", "message", good_frame("goto/zero"), "unknown_message")

# -- header: flags, call_id or timeout_us wrong for the frame kind
bad("header/call_flag_on_message", "empty", "message", hdr(EMPTY, flags=CALL), "header")
bad("header/call_flag_on_message_any", None, "call", hdr(EMPTY, flags=CALL), "header")
bad("header/reply_flag_on_message", "uints", "message", hdr(UINTS, flags=REPLY), "header")
bad("header/reply_flag_on_message_any", None, "reply", hdr(UINTS, flags=REPLY), "header")
bad("header/message_flags_on_rpc", "ping", "call", hdr(PING_CALL, flags=0), "header")
bad("header/message_flags_on_rpc_any", None, "message", hdr(PING_CALL, flags=0), "header")
bad("header/reserved_0x10", "empty", "message", hdr(EMPTY, flags=0x10), "header")
bad("header/reserved_0x80", "empty", "message", hdr(EMPTY, flags=0x80), "header")
bad("header/reserved_0x80_any", None, "message", hdr(EMPTY, flags=0x80), "header")
bad("header/call_reserved_0x40", "ping", "call", hdr(PING_CALL, flags=CALL | 0x40), "header")
bad("header/call_and_reply", "ping", "call", hdr(PING_CALL, flags=CALL | REPLY), "header")
bad("header/call_and_reply_as_reply", "ping", "reply", hdr(PING_CALL, flags=CALL | REPLY), "header")
bad("header/error_alone", None, "reply", hdr(PING_REPLY, flags=ERROR), "header")
STATUS_BODY = u64(1) + u32(4) + b"boom"
bad("header/error_reply_to_reply_decoder", "ping", "reply", frame(NUM["ping"], STATUS_BODY, REPLY | ERROR), "header")
bad("header/error_reply_any", None, "reply", frame(NUM["echo"], STATUS_BODY, REPLY | ERROR), "header")
bad("header/cancel_to_call_decoder", "ping", "call", frame(NUM["ping"], b"", CANCEL), "header")
bad("header/cancel_to_reply_decoder", "ping", "reply", frame(NUM["ping"], b"", CANCEL, call_id=3), "header")
bad("header/cancel_any", None, "call", frame(NUM["ping"], b"", CANCEL, call_id=3), "header")
bad("header/cancel_on_message", "empty", "message", hdr(EMPTY, flags=CANCEL), "header")
bad("header/call_to_reply_decoder", "ping", "reply", PING_CALL, "header")
bad("header/reply_to_call_decoder", "ping", "call", PING_REPLY, "header")
bad("header/call_id_on_message", "empty", "message", hdr(EMPTY, call_id=1), "header")
bad("header/call_id_on_message_any", None, "message", hdr(UINTS, call_id=0xFFFFFFFF), "header")
bad("header/call_id_high_byte_on_message", "uints", "message", hdr(UINTS, call_id=0x01000000), "header")
bad("header/timeout_on_message", "empty", "message", hdr(EMPTY, timeout=1), "header")
bad("header/timeout_on_reply", "ping", "reply", hdr(PING_REPLY, timeout=5), "header")
bad("header/timeout_on_reply_any", None, "reply", hdr(PING_REPLY, call_id=9, timeout=5), "header")
bad("header/timeout_max_on_reply", "echo", "reply", hdr(good_frame("echo/reply/zero"), timeout=U32MAX), "header")

# -- bound: a string or array longer than its bound (checked before the bytes)
S_SHORT, S_SEP, S_LONG = good_parts("strings/ascii")[0]
bad("strings/short_bound_plus_1", "strings", "message",
    body_frame("strings", "message", [u32(5) + b"abcde", S_SEP, S_LONG]), "bound")
bad("strings/short_bound_plus_1_no_bytes", "strings", "message",
    body_frame("strings", "message", [u32(5)]), "bound")
bad("strings/short_len_ffffffff", "strings", "message",
    body_frame("strings", "message", [u32(U32MAX), S_SEP, S_LONG]), "bound")
bad("strings/short_len_ffffffff_no_bytes", "strings", "message",
    body_frame("strings", "message", [u32(U32MAX)]), "bound")
bad("strings/short_len_80000000", "strings", "message",
    body_frame("strings", "message", [u32(0x80000000), b"abcd"]), "bound")
bad("strings/long_bound_plus_1", "strings", "message",
    body_frame("strings", "message", [S_SHORT, S_SEP, u32(301) + b"x" * 301]), "bound")
bad("strings/long_bound_plus_1_no_bytes", "strings", "message",
    body_frame("strings", "message", [S_SHORT, S_SEP, u32(301) + b"x" * 10]), "bound")
bad("echo/call/text_bound_plus_1", "echo", "call",
    body_frame("echo", "call", [u32(1), u32(33) + b"y" * 33]), "bound")
bad("echo/reply/reply_bound_plus_1", "echo", "reply",
    body_frame("echo", "reply", [u32(1), u32(33) + b"y" * 33]), "bound")
bad("query/reply/status_bound_plus_1", "query", "reply",
    body_frame("query", "reply", [u64(0), u32(17) + b"z" * 17, u32(0), u64(0)], ncaps=1), "bound")
bad("keywords/switch_bound_plus_1", "keywords", "message",
    body_frame("keywords", "message", [u32(0), u32(0), u8(0), u8(0), u16(0), u64(0), u32(9) + b"default::",
                                       u32(0)]), "bound")
bad("keywords/range_bound_plus_1", "keywords", "message",
    body_frame("keywords", "message", [u32(0), u32(0), u8(0), u8(0), u16(0), u64(0), u32(0),
                                       u32(5) + b"\x01\x02\x03\x04\x05"]), "bound")
bad("arrays/bytes_bound_plus_1", "arrays", "message",
    body_frame("arrays", "message", [u32(9) + bytes(9), u32(0), u32(0), u32(0)]), "bound")
bad("arrays/words_bound_plus_1_no_elements", "arrays", "message",
    body_frame("arrays", "message", [u32(0), u32(5)]), "bound")
bad("arrays/pts_count_ffffffff", "arrays", "message",
    body_frame("arrays", "message", [u32(0), u32(0), u32(U32MAX)]), "bound")
bad("arrays/colors_bound_plus_1", "arrays", "message",
    body_frame("arrays", "message", [u32(0), u32(0), u32(0), u32(5) + bytes(20)]), "bound")
bad("more_arrays/lines_bound_plus_1", "more_arrays", "message",
    body_frame("more_arrays", "message", [u32(0), u32(0), u32(0), u32(0), u32(3) + bytes(21 * 3)]), "bound")
bad("cap_arrays/fds_bound_plus_1", "cap_arrays", "message",
    body_frame("cap_arrays", "message", [u32(5) + b"".join(u32(i) for i in range(5)), u32(0), u8(0)], ncaps=5),
    "bound")
bad("mixed/call/pts_bound_plus_1", "mixed", "call",
    body_frame("mixed", "call", [u8(0), u8(0), u32(3) + bytes(24)]), "bound")
bad("mixed/reply/data_bound_plus_1", "mixed", "reply",
    body_frame("mixed", "reply", [u64(0), u32(0), u32(9) + bytes(9)]), "bound")
bad("shadows/buf_count_ffffffff", "shadows", "message",
    body_frame("shadows", "message", [u8(0), u16(0), u32(0), u8(0), u32(U32MAX)], ncaps=1), "bound")

# -- enum: a value >= the number of enumerators
bad("enums/color_3", "enums", "message", body_frame("enums", "message", [u32(3), u32(0), u32(0)]), "enum")
bad("enums/color_ffffffff", "enums", "message", body_frame("enums", "message", [u32(U32MAX), u32(0), u32(0)]), "enum")
bad("enums/color_80000000", "enums", "message", body_frame("enums", "message", [u32(0x80000000), u32(0), u32(0)]), "enum")
bad("enums/color_100", "enums", "message", body_frame("enums", "message", [u32(0x100), u32(0), u32(0)]), "enum")
bad("enums/power_3", "enums", "message", body_frame("enums", "message", [u32(0), u32(3), u32(0)]), "enum")
bad("enums/single_1", "enums", "message", body_frame("enums", "message", [u32(0), u32(0), u32(1)]), "enum")
bad("enums/single_ffffffff", "enums", "message", body_frame("enums", "message", [u32(2), u32(2), u32(U32MAX)]), "enum")
bad("arrays/color_element_3", "arrays", "message",
    body_frame("arrays", "message", [u32(0), u32(0), u32(0), u32(2) + u32(2) + u32(3)]), "enum")
ST_PT, ST_LN, ST_REC, ST_B = good_parts("structs/zero")[0]
bad("structs/line_colour_3", "structs", "message",
    body_frame("structs", "message", [ST_PT, patch(ST_LN, 16, u32(3)), ST_REC, ST_B]), "enum")
bad("structs/record_state_3", "structs", "message",
    body_frame("structs", "message", [ST_PT, ST_LN, patch(ST_REC, 43, u32(3)), ST_B]), "enum")
bad("more_arrays/line_colour_ffffffff", "more_arrays", "message",
    body_frame("more_arrays", "message", [u32(0), u32(0), u32(0), u32(0), u32(1) + patch(bytes(21), 16, u32(U32MAX))]),
    "enum")
bad("mixed/reply/d_3", "mixed", "reply", body_frame("mixed", "reply", [u64(0), u32(3), u32(0)]), "enum")

# -- bool: a bool byte other than 0 or 1
MISC = good_parts("misc/zero")[0]
bad("misc/flag_2", "misc", "message", body_frame("misc", "message", [u8(2)] + MISC[1:]), "bool")
bad("misc/flag_ff", "misc", "message", body_frame("misc", "message", [u8(0xFF)] + MISC[1:]), "bool")
bad("misc/last_2", "misc", "message", body_frame("misc", "message", MISC[:3] + [u8(2)]), "bool")
bad("misc/last_80", "misc", "message", body_frame("misc", "message", MISC[:3] + [u8(0x80)]), "bool")
bad("structs/line_visible_2", "structs", "message",
    body_frame("structs", "message", [ST_PT, patch(ST_LN, 20, u8(2)), ST_REC, ST_B]), "bool")
bad("more_arrays/bits_element_2", "more_arrays", "message",
    body_frame("more_arrays", "message", [u32(3) + b"\x01\x00\x02", u32(0), u32(0), u32(0), u32(0)]), "bool")
bad("more_arrays/line_visible_ff", "more_arrays", "message",
    body_frame("more_arrays", "message", [u32(0), u32(0), u32(0), u32(0), u32(1) + patch(bytes(21), 20, u8(0xFF))]),
    "bool")
bad("keywords/default_2", "keywords", "message",
    body_frame("keywords", "message", [u32(0), u32(0), u8(2), u8(0), u16(0), u64(0), u32(0), u32(0)]), "bool")
bad("mixed/call/c_2", "mixed", "call", body_frame("mixed", "call", [u8(0), u8(2), u32(0)]), "bool")
bad("shadows/ctx_2", "shadows", "message",
    body_frame("shadows", "message", [u8(0), u16(0), u32(0), u8(0), u32(0), u32(0), u8(2), u64(0), u32(0), u8(0),
                                      u32(0), u8(0), u8(0), u8(0)], ncaps=1), "bool")

# -- cap: a cap index out of order, or ncaps not the number of caps
C_C, C_G, C_BETWEEN, C_PAIR, C_LAST = good_parts("caps/max")[0]


def caps_frame(idx, ncaps=5):
    return body_frame("caps", "message", [u32(idx[0]), u32(idx[1]), C_BETWEEN, u32(idx[2]) + u32(idx[3]),
                                          u32(idx[4])], ncaps)


bad("caps/first_two_swapped", "caps", "message", caps_frame([1, 0, 2, 3, 4]), "cap")
bad("caps/all_zero", "caps", "message", caps_frame([0, 0, 0, 0, 0]), "cap")
bad("caps/pair_swapped", "caps", "message", caps_frame([0, 1, 3, 2, 4]), "cap")
bad("caps/from_one", "caps", "message", caps_frame([1, 2, 3, 4, 5], ncaps=6), "cap")
bad("caps/index_ffffffff", "caps", "message", caps_frame([U32MAX, 1, 2, 3, 4]), "cap")
bad("caps/last_repeated", "caps", "message", caps_frame([0, 1, 2, 3, 3]), "cap")
bad("caps/ncaps_6", "caps", "message", hdr(CAPS, ncaps=6), "cap")
bad("caps/ncaps_4", "caps", "message", hdr(CAPS, ncaps=4), "cap")
bad("caps/ncaps_0", "caps", "message", hdr(CAPS, ncaps=0), "cap")
bad("caps/ncaps_255", "caps", "message", hdr(CAPS, ncaps=255), "cap")
bad("empty/ncaps_1", "empty", "message", hdr(EMPTY, ncaps=1), "cap")
bad("empty/ncaps_1_any", None, "message", hdr(EMPTY, ncaps=1), "cap")
bad("uints/ncaps_1", "uints", "message", hdr(UINTS, ncaps=1), "cap")
bad("ping/reply/ncaps_1", "ping", "reply", hdr(PING_REPLY, ncaps=1), "cap")
CA = good_frame("cap_arrays/at_bound")
bad("cap_arrays/ncaps_7", "cap_arrays", "message", hdr(CA, ncaps=7), "cap")
bad("cap_arrays/ncaps_9", "cap_arrays", "message", hdr(CA, ncaps=9), "cap")
bad("cap_arrays/ncaps_255_no_caps", "cap_arrays", "message",
    hdr(good_frame("cap_arrays/empty"), ncaps=255), "cap")
bad("cap_arrays/ncaps_0_two_fds", "cap_arrays", "message", hdr(good_frame("cap_arrays/fds_only"), ncaps=0), "cap")
bad("cap_arrays/fds_out_of_order", "cap_arrays", "message",
    body_frame("cap_arrays", "message", [u32(2) + u32(1) + u32(0), u32(0), u8(0)], ncaps=2), "cap")
bad("cap_arrays/handle_swapped", "cap_arrays", "message",
    body_frame("cap_arrays", "message", [u32(2) + u32(0) + u32(1), u32(1) + u32(3) + u16(0) + u32(2), u8(0)],
               ncaps=4), "cap")
bad("cap_arrays/handle_restarts_at_0", "cap_arrays", "message",
    body_frame("cap_arrays", "message", [u32(1) + u32(0), u32(1) + u32(0) + u16(0) + u32(1), u8(0)], ncaps=2),
    "cap")
bad("notify/call/swapped", "notify", "call", body_frame("notify", "call", [u32(0), u32(1), u32(0)], ncaps=2), "cap")
bad("notify/call/ncaps_1", "notify", "call", hdr(good_frame("notify/call/zero"), ncaps=1), "cap")
bad("query/reply/ncaps_0", "query", "reply", hdr(good_frame("query/reply/zero"), ncaps=0), "cap")
bad("query/reply/index_1", "query", "reply",
    body_frame("query", "reply", [u64(0), u32(0), u32(1), u64(0)], ncaps=1), "cap")
bad("shadows/ncaps_0", "shadows", "message", hdr(good_frame("shadows/zero"), ncaps=0), "cap")

# -- nul: a string with a NUL byte
bad("strings/short_nul_middle", "strings", "message",
    body_frame("strings", "message", [u32(3) + b"a\x00b", S_SEP, S_LONG]), "nul")
bad("strings/short_all_nul_at_bound", "strings", "message",
    body_frame("strings", "message", [u32(4) + b"\x00" * 4, S_SEP, S_LONG]), "nul")
bad("strings/long_only_nul", "strings", "message", body_frame("strings", "message", [S_SHORT, S_SEP, u32(1) + b"\x00"]),
    "nul")
bad("strings/long_nul_last", "strings", "message",
    body_frame("strings", "message", [S_SHORT, S_SEP, u32(6) + b"hello\x00"]), "nul")
bad("strings/long_nul_first", "strings", "message",
    body_frame("strings", "message", [S_SHORT, S_SEP, u32(6) + b"\x00hello"]), "nul")
bad("echo/call/text_nul", "echo", "call", body_frame("echo", "call", [u32(0), u32(2) + b"\x00x"]), "nul")
bad("echo/reply/reply_nul", "echo", "reply", body_frame("echo", "reply", [u32(0), u32(2) + b"x\x00"]), "nul")
bad("keywords/switch_nul", "keywords", "message",
    body_frame("keywords", "message", [u32(0), u32(0), u8(0), u8(0), u16(0), u64(0), u32(8) + b"case\x00xyz",
                                       u32(0)]), "nul")
bad("query/reply/status_nul", "query", "reply",
    body_frame("query", "reply", [u64(0), u32(3) + b"o\x00k", u32(0), u64(0)], ncaps=1), "nul")

# ---------------------------------------------------------------- checks


def check():
    names = set()

    def unique(name):
        assert name not in names, f"duplicate vector name {name}"
        names.add(name)

    covered = set()
    for name, msg, kind, fields in VECTORS:
        unique(name)
        f = encode(msg, kind, fields)
        for mode in MODES:
            got = decode(f, msg, kind, mode)
            assert got == (msg, kind, fields), (name, mode, got)
            assert decode(f, None, None, mode) == (msg, kind, fields), (name, mode)
        covered.add((msg, kind))
    for m, rpc, _ in MESSAGES:
        for kind in (("call", "reply") if rpc else ("message",)):
            assert (m, kind) in covered, f"no good vector for {m} {kind}"
    for name, msg, kind, fields, f in DECODE_ONLY:
        unique(name)
        for mode in MODES:
            assert decode(f, msg, kind, mode) == (msg, kind, fields), name
            assert decode(f, None, None, mode) == (msg, kind, fields), name
    for name, msg, kind, fields, error in UNENCODABLE:
        unique("unencodable/" + name)
        try:
            encode(msg, kind, fields)
        except WireError as e:
            assert e.code == error, (name, e.code, error)
        else:
            raise AssertionError(f"{name}: encoded")
    codes = set()
    for name, msg, kind, f, error in MALFORMED:
        unique(name)
        codes.add(error)
        for mode in MODES:
            try:
                got = decode(f, msg, kind, mode)
            except WireError as e:
                assert e.code == error, f"{name}: got {e.code} ({e}), want {error}, mode {mode}"
            else:
                raise AssertionError(f"{name}: decoded as {got}, mode {mode}")
        if msg is not None:
            # The interface-wide decoder must not take the frame for the
            # message and kind asked for (it may take it for another one:
            # a typed decoder also rejects frames of other messages).
            for mode in MODES:
                try:
                    got = decode(f, None, None, mode)
                except WireError:
                    continue
                assert got[:2] != (msg, kind), f"{name}: interface-wide decode accepts it as {msg} {kind}"
    want = {"truncated", "size", "trailing", "unknown_message", "header", "bound", "enum", "bool", "cap", "nul"}
    assert codes == want, codes ^ want


# ---------------------------------------------------------------- metadata
# The metadata trailer of an rpc call or reply (docs/wire.md, "Metadata"),
# written to metadata.json: trailers taken off a call and put back,
# trailers a receiver rejects, and metadata a sender refuses; every frame
# of those extends the same call, MD_CALL. Then the same trailer on a
# reply and an error reply (MD_REPLIES).

FLAG_META = 0x10
MD_KEYS, MD_KEY_LEN, MD_VALUE_LEN, MD_LEN = 32, 64, 1024, 8192
MD_KEY_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789-_.")
MD_CALL = frame(3, bytes(range(1, 9)), CALL, call_id=9, timeout=100)
MD_FLAGS = (CALL | FLAG_META, REPLY | FLAG_META, REPLY | ERROR | FLAG_META)


def md_entries(entries):
    """The entries' bytes, in the order given, unchecked."""
    out = b""
    for k, v in entries:
        k, v = k.encode(), v.encode()
        out += u8(len(k)) + k + u16(len(v)) + v
    return out


def md_frame(entries_bytes, call=MD_CALL, block_len=None):
    """call with META set, followed by the entries and their length
    (block_len if given), its size fixed."""
    if block_len is None:
        block_len = len(entries_bytes)
    f = bytearray(call + entries_bytes + u16(block_len))
    f[6] |= FLAG_META
    f[0:4] = u32(len(f))
    return bytes(f)


def md_send(entries):
    """The trailer a sender appends for entries, or WireError: what a
    sender refuses, with the receiver's codes. Empty metadata is no
    trailer."""
    if len(entries) > MD_KEYS:
        raise WireError("bound", "too many entries")
    seen, n = set(), 0
    for k, v in entries:
        kb, vb = k.encode(), v.encode()
        if not 1 <= len(kb) <= MD_KEY_LEN:
            raise WireError("bound", "key length")
        if any(c not in MD_KEY_BYTES for c in kb):
            raise WireError("header", "key byte")
        if len(vb) > MD_VALUE_LEN:
            raise WireError("bound", "value length")
        if 0 in vb:
            raise WireError("nul", "value")
        if kb in seen:
            raise WireError("bound", "key repeated")
        seen.add(kb)
        n += 3 + len(kb) + len(vb)
    if n > MD_LEN:
        raise WireError("bound", "entries' length")
    if not entries:
        return b""
    return md_frame(md_entries(sorted(entries, key=lambda e: e[0].encode())))[len(MD_CALL):]


def md_split(f):
    """The call and the entries of f, a call with metadata, or WireError,
    in the order of checks of docs/wire.md, "Metadata"."""
    if len(f) < HEADER_SIZE or f[6] not in MD_FLAGS or struct.unpack_from("<I", f)[0] != len(f):
        raise WireError("header", "not a call or reply with metadata")
    n = len(f)
    if n < HEADER_SIZE + 2:
        raise WireError("truncated", "no entries' length")
    block = struct.unpack_from("<H", f, n - 2)[0]
    if block > MD_LEN or block > n - 2 - HEADER_SIZE:
        raise WireError("bound", "entries' length")
    start, end = n - 2 - block, n - 2
    off, entries, prev = start, [], None
    while off < end:
        if len(entries) == MD_KEYS:
            raise WireError("bound", "too many entries")
        klen = f[off]
        if not 1 <= klen <= MD_KEY_LEN:
            raise WireError("bound", "key length")
        if off + 1 + klen + 2 > end:
            raise WireError("truncated", "entry cut short")
        k = f[off + 1:off + 1 + klen]
        if any(c not in MD_KEY_BYTES for c in k):
            raise WireError("header", "key byte")
        if prev is not None and k <= prev:
            raise WireError("bound", "key out of order or repeated")
        vlen = struct.unpack_from("<H", f, off + 1 + klen)[0]
        voff = off + 3 + klen
        if vlen > MD_VALUE_LEN or voff + vlen > end:
            raise WireError("bound", "value length")
        v = f[voff:voff + vlen]
        if 0 in v:
            raise WireError("nul", "value")
        entries.append((k.decode(), v.decode()))
        prev, off = k, voff + vlen
    call = bytearray(f[:start])
    call[6] &= ~FLAG_META & 0xFF
    call[0:4] = u32(start)
    return bytes(call), entries


MD_TRAILERS = []     # (name, entries): a sender writes them, a receiver reads them back
MD_DECODE_ONLY = []  # (name, frame, entries): a receiver takes them, no sender writes them
MD_MALFORMED = []    # (name, frame, error)
MD_UNSENDABLE = []   # (name, entries, error)
MD_REPLIES = []      # (name, frame without metadata, entries): replies a sender writes, a receiver reads back


def kv(*pairs):
    return list(pairs)


def letters(n, first=0):
    """n distinct keys of two letters, in order."""
    return [chr(ord("a") + (first + i) // 26) + chr(ord("a") + (first + i) % 26) for i in range(n)]


MD_TRAILERS += [
    ("one", kv(("k", "v"))),
    ("two", kv(("add", "40"), ("trace-id", "abc"))),
    ("empty_value", kv(("k", ""))),
    # byte order: '-' < '.' < digits < '_' < letters, and a key before its extensions
    ("byte_order", kv(("a", "1"), ("a-b", "2"), ("a.b", "3"), ("a0", "4"), ("a_b", "5"), ("ab", "6"))),
    ("every_key_byte", kv(("-.0123456789_abcdefghijklmnopqrstuvwxyz", "x"))),
    ("key_at_bound", kv(("k" * MD_KEY_LEN, "v"))),
    ("value_at_bound", kv(("k", "v" * MD_VALUE_LEN))),
    ("value_not_ascii", kv(("k", "caf\u00e9 \u0001\u007f"))),
    ("keys_at_bound", kv(*[(k, k) for k in letters(MD_KEYS)])),
    # 7 entries of 1028 bytes and one of 996: 8192
    ("entries_at_bound", kv(*[(k, "v" * MD_VALUE_LEN) for k in "abcdefg"], ("h", "v" * 992))),
]

MD_DECODE_ONLY += [
    ("no_entries", md_frame(b""), []),
]


def md_bad(name, f, error):
    MD_MALFORMED.append((name, bytes(f), error))


def md_raw(klen, key, vlen, value):
    return u8(klen) + key + u16(vlen) + value


GOOD2 = md_entries(kv(("a", "1"), ("b", "2")))
md_bad("header/no_meta_flag", MD_CALL + md_entries(kv(("k", "v"))) + u16(6), "header")
md_bad("header/meta_on_message", hdr(md_frame(md_entries(kv(("k", "v")))), flags=FLAG_META), "header")
md_bad("header/meta_on_cancel", hdr(md_frame(md_entries(kv(("k", "v")))), flags=CANCEL | FLAG_META), "header")
md_bad("header/meta_on_error_alone", hdr(md_frame(md_entries(kv(("k", "v")))), flags=ERROR | FLAG_META), "header")
md_bad("truncated/no_entries_length", cut(md_frame(b"", call=frame(3, b"", CALL)), HEADER_SIZE + 1), "truncated")
md_bad("truncated/header_alone", cut(md_frame(b"", call=frame(3, b"", CALL)), HEADER_SIZE), "truncated")
md_bad("bound/entries_length_past_frame", md_frame(GOOD2, block_len=len(GOOD2) + len(MD_CALL) - HEADER_SIZE + 1),
       "bound")
md_bad("bound/entries_length_over_bound",
       md_frame(md_entries(kv(*[(k, "v" * MD_VALUE_LEN) for k in "abcdefg"], ("h", "v" * 993)))), "bound")
md_bad("bound/key_length_0", md_frame(md_raw(0, b"", 1, b"v")), "bound")
md_bad("bound/key_length_65", md_frame(md_raw(65, b"k" * 65, 1, b"v")), "bound")
md_bad("bound/key_length_255_past_entries", md_frame(md_raw(255, b"k" * 4, 0, b"")), "bound")
md_bad("truncated/key_cut_short", md_frame(b"\x06abc"), "truncated")
md_bad("truncated/value_length_cut_short", md_frame(b"\x01k\x01"), "truncated")
md_bad("truncated/second_key_cut_short", md_frame(md_entries(kv(("a", "1"))) + b"\x02b"), "truncated")
md_bad("header/key_upper_case", md_frame(md_entries(kv(("Key", "v")))), "header")
md_bad("header/key_space", md_frame(md_entries(kv(("a b", "v")))), "header")
md_bad("header/key_slash", md_frame(md_entries(kv(("a/b", "v")))), "header")
md_bad("header/key_nul", md_frame(md_raw(3, b"a\x00b", 1, b"v")), "header")
md_bad("header/key_not_ascii", md_frame(md_entries(kv(("caf\u00e9", "v")))), "header")
md_bad("bound/keys_out_of_order", md_frame(md_entries(kv(("b", "1"), ("a", "2")))), "bound")
md_bad("bound/key_before_its_prefix", md_frame(md_entries(kv(("ab", "1"), ("a", "2")))), "bound")
md_bad("bound/key_repeated", md_frame(md_entries(kv(("a", "1"), ("a", "1")))), "bound")
md_bad("bound/last_key_out_of_order", md_frame(md_entries(kv(*[(k, "") for k in letters(5)], ("aa", "")))), "bound")
md_bad("bound/value_length_1025", md_frame(md_entries(kv(("k", "v" * (MD_VALUE_LEN + 1))))), "bound")
md_bad("bound/value_past_entries", md_frame(md_raw(1, b"k", 5, b"vv")), "bound")
md_bad("nul/value", md_frame(md_entries(kv(("k", "a\u0000b")))), "nul")
md_bad("bound/33_entries", md_frame(md_entries(kv(*[(k, "") for k in letters(MD_KEYS + 1)]))), "bound")
# where one trailer has two faults, the order of checks decides
md_bad("order/33rd_entry_with_bad_key",
       md_frame(md_entries(kv(*[(k, "") for k in letters(MD_KEYS)], ("Z", "")))), "bound")
md_bad("order/bad_key_out_of_order", md_frame(md_entries(kv(("b", "1"), ("A", "2")))), "header")
md_bad("order/bad_key_cut_short", md_frame(b"\x06ABC"), "truncated")
md_bad("order/out_of_order_value_nul", md_frame(md_entries(kv(("b", "1"), ("a", "\u0000")))), "bound")
md_bad("order/nul_before_later_fault", md_frame(md_entries(kv(("a", "\u0000"), ("A", "")))), "nul")

# A reply's out arguments, and an error reply's status (code 5, detail
# "gone": docs/wire.md, "Status"), each with a trailer.
MD_REPLIES += [
    ("reply", frame(3, bytes(range(1, 9)), REPLY, call_id=9), kv(("retry-after", "2"), ("server-ms", "17"))),
    ("error_reply", frame(3, u64(5) + u32(4) + b"gone", REPLY | ERROR, call_id=9), kv(("retry-after", "30"))),
    ("empty_reply", frame(3, b"", REPLY, call_id=9), kv(("k", "v"))),
]

MD_UNSENDABLE += [
    ("bound/33_entries", kv(*[(k, "") for k in letters(MD_KEYS + 1)]), "bound"),
    ("bound/key_empty", kv(("", "v")), "bound"),
    ("bound/key_length_65", kv(("k" * 65, "v")), "bound"),
    ("header/key_upper_case", kv(("Key", "v")), "header"),
    ("header/key_space", kv(("a b", "v")), "header"),
    ("bound/value_length_1025", kv(("k", "v" * (MD_VALUE_LEN + 1))), "bound"),
    ("nul/value", kv(("k", "a\u0000b")), "nul"),
    ("bound/entries_over_bound", kv(*[(k, "v" * MD_VALUE_LEN) for k in "abcdefg"], ("h", "v" * 993)), "bound"),
    ("bound/key_repeated", kv(("a", "1"), ("b", "2"), ("a", "3")), "bound"),
]


def check_metadata():
    names = set()

    def unique(name):
        assert name not in names, f"duplicate metadata vector name {name}"
        names.add(name)

    for name, entries in MD_TRAILERS:
        unique(name)
        assert entries == sorted(entries, key=lambda e: e[0].encode()), f"{name}: entries not in wire order"
        f = MD_CALL + md_send(entries)
        f = md_frame(f[len(MD_CALL):-2])
        assert md_split(f) == (MD_CALL, entries), name
        # a sender sorts what it is given
        assert md_send(list(reversed(entries))) == md_send(entries), name
    for name, f, entries in MD_DECODE_ONLY:
        unique(name)
        assert md_split(f) == (MD_CALL, entries), name
    codes = set()
    for name, f, error in MD_MALFORMED:
        unique(name)
        codes.add(error)
        try:
            got = md_split(f)
        except WireError as e:
            assert e.code == error, f"{name}: got {e.code} ({e}), want {error}"
        else:
            raise AssertionError(f"{name}: split as {got}")
    assert codes == {"header", "truncated", "bound", "nul"}, codes
    for name, base, entries in MD_REPLIES:
        unique("reply/" + name)
        assert md_split(md_frame(md_send(entries)[:-2], call=base)) == (base, entries), name
    for name, entries, error in MD_UNSENDABLE:
        unique("unsendable/" + name)
        try:
            md_send(entries)
        except WireError as e:
            assert e.code == error, (name, e.code, error)
        else:
            raise AssertionError(f"{name}: sent")


def render_metadata():
    def line_of(obj):
        return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))

    def block(key, items, last=False):
        out = [f' "{key}": [']
        for i, obj in enumerate(items):
            out.append("  " + line_of(obj) + ("," if i + 1 < len(items) else ""))
        out.append(" ]" + ("" if last else ","))
        return out

    def pairs(entries):
        return [[k, v] for k, v in entries]

    lines = ["{",
             ' "comment": "Generated by mkvectors.py from docs/wire.md, \\"Metadata\\"; do not edit. '
             'See README.md.",',
             f' "call": "{MD_CALL.hex()}",']
    lines += block("trailers", [{"name": name, "entries": pairs(entries),
                                 "hex": md_frame(md_send(entries)[:-2]).hex()} for name, entries in MD_TRAILERS])
    lines += block("decode_only", [{"name": name, "entries": pairs(entries), "hex": f.hex()}
                                   for name, f, entries in MD_DECODE_ONLY])
    lines += block("malformed", [{"name": name, "hex": f.hex(), "error": error} for name, f, error in MD_MALFORMED])
    lines += block("unsendable", [{"name": name, "entries": pairs(entries), "error": error}
                                  for name, entries, error in MD_UNSENDABLE])
    lines += block("replies", [{"name": name, "base": base.hex(), "entries": pairs(entries),
                                "hex": md_frame(md_send(entries)[:-2], call=base).hex()}
                               for name, base, entries in MD_REPLIES], last=True)
    lines.append("}")
    text = "\n".join(lines) + "\n"
    json.loads(text)  # well-formed
    return text


# ---------------------------------------------------------------- output


def to_json(v):
    if isinstance(v, bool) or isinstance(v, str):
        return v
    if isinstance(v, int):
        return str(v) if abs(v) > JSON_SAFE else v
    if isinstance(v, list):
        return [to_json(e) for e in v]
    if isinstance(v, dict):
        return {k: to_json(e) for k, e in v.items()}
    raise AssertionError(v)


def ncaps_of(f):
    return f[7] if len(f) >= 8 else 0


def render():
    def line_of(obj):
        return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))

    def block(key, items, last=False):
        out = [f' "{key}": [']
        for i, obj in enumerate(items):
            out.append("  " + line_of(obj) + ("," if i + 1 < len(items) else ""))
        out.append(" ]" + ("" if last else ","))
        return out

    vectors = [{"name": name, "message": msg, "kind": kind, "ncaps": enc_parts(msg, kind, fields)[1],
                "fields": to_json(fields), "hex": encode(msg, kind, fields).hex()}
               for name, msg, kind, fields in VECTORS]
    malformed = []
    for name, msg, kind, f, error in MALFORMED:
        obj = {"name": name}
        if msg is not None:
            obj["message"] = msg
        obj.update({"kind": kind, "ncaps": ncaps_of(f), "hex": f.hex(), "error": error})
        malformed.append(obj)
    decode_only_ = [{"name": name, "message": msg, "kind": kind, "ncaps": ncaps_of(f), "fields": to_json(fields),
                     "hex": f.hex()} for name, msg, kind, fields, f in DECODE_ONLY]
    unencodable_ = [{"name": name, "message": msg, "kind": kind, "fields": to_json(fields), "error": error}
                    for name, msg, kind, fields, error in UNENCODABLE]
    lines = ["{",
             ' "comment": "Generated by mkvectors.py from a hand transcription of alltypes.if; do not edit. '
             'See README.md.",',
             ' "interface": "alltypes.if",',
             ' "includes": ["types.if"],']
    lines += block("vectors", vectors)
    lines += block("malformed", malformed)
    lines += block("decode_only", decode_only_)
    lines += block("unencodable", unencodable_, last=True)
    lines.append("}")
    text = "\n".join(lines) + "\n"
    json.loads(text)  # well-formed
    return text


def main():
    check()
    check_metadata()
    here = os.path.dirname(os.path.abspath(__file__))
    files = [("alltypes.json", render(), f"{len(VECTORS)} vectors, {len(MALFORMED)} malformed, "
              f"{len(DECODE_ONLY)} decode-only, {len(UNENCODABLE)} unencodable"),
             ("metadata.json", render_metadata(), f"{len(MD_TRAILERS)} trailers, {len(MD_MALFORMED)} malformed, "
              f"{len(MD_DECODE_ONLY)} decode-only, {len(MD_UNSENDABLE)} unsendable")]
    if sys.argv[1:] == ["-check"]:
        for name, text, _ in files:
            try:
                with open(os.path.join(here, name), encoding="utf-8") as fh:
                    stale = fh.read() != text
            except FileNotFoundError:
                stale = True
            if stale:
                sys.exit(f"{name} is stale: run python3 testdata/wire/mkvectors.py")
        return
    if sys.argv[1:]:
        sys.exit(__doc__)
    for name, text, counts in files:
        path = os.path.join(here, name)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"wrote {path}: {counts}")


if __name__ == "__main__":
    main()
