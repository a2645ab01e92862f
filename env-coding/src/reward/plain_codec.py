# codegym's plain-data codec, shared by the trusted programs that run as main.py (the unit-test
# harness, the differential runner; prepended to each). Only exact builtin types are encoded, in a
# tagged JSON form (floats by their bits, integers as text), so nothing of a candidate's making
# crosses it; what is not plain data goes to `other` (or is a TypeError). Bound once, at start-up.
def _cg_plain_codec():
    import struct
    _type, _str, _int, _complex, _bytes = type, str, int, complex, bytes
    _tuple, _list, _dict, _set, _frozenset = tuple, list, dict, set, frozenset
    _pack, _unpack = struct.pack, struct.unpack

    def bits(f):
        return _str(_unpack("<Q", _pack("<d", f))[0])

    def unbits(s):
        return _unpack("<d", _pack("<Q", _int(s)))[0]

    def enc(v, other=None, depth=0):
        t = _type(v)
        if v is None or t is bool:
            return v
        if t is _int:
            return {"i": _str(v)}
        if t is float:
            return {"f": bits(v)}
        if t is _complex:
            return {"c": [bits(v.real), bits(v.imag)]}
        if t is _str:
            return {"s": v.encode("utf-8", "surrogatepass").decode("utf-8", "replace")}
        if t is _bytes:
            return {"b": v.hex()}
        if depth > 200:
            raise TypeError("value nested too deeply")
        if t is _list:
            return {"l": [enc(x, other, depth + 1) for x in v]}
        if t is _tuple:
            return {"t": [enc(x, other, depth + 1) for x in v]}
        if t is _set:
            return {"S": [enc(x, other, depth + 1) for x in v]}
        if t is _frozenset:
            return {"F": [enc(x, other, depth + 1) for x in v]}
        if t is _dict:
            return {"d": [[enc(k, other, depth + 1), enc(x, other, depth + 1)] for k, x in v.items()]}
        if other is not None:
            return other(v)
        raise TypeError("only plain data is passed to and from the candidate")

    def dec(v, handles=None):
        if v is None or _type(v) is bool:
            return v
        (tag, x), = v.items()
        if tag == "i":
            return _int(x)
        if tag == "f":
            return unbits(x)
        if tag == "c":
            return _complex(unbits(x[0]), unbits(x[1]))
        if tag == "s":
            return x
        if tag == "b":
            return _bytes.fromhex(x)
        if tag == "l":
            return [dec(i, handles) for i in x]
        if tag == "t":
            return _tuple([dec(i, handles) for i in x])
        if tag == "S":
            return {dec(i, handles) for i in x}
        if tag == "F":
            return _frozenset([dec(i, handles) for i in x])
        if tag == "d":
            return {dec(k, handles): dec(i, handles) for k, i in x}
        if tag == "h" and handles is not None:
            return handles(x)
        raise TypeError("the candidate returned a non-builtin value; only plain data is compared")

    return enc, dec


