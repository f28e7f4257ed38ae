#!/usr/bin/env python3
# Annotated hex dump of a small .kvz file, as printed in spec/kvzip_format.md "Example". Reads the
# file with its own few lines of parsing (a third reading of the spec). Standard library only;
# run with the system python3:  python3 spec/hexdump_kvz.py tests/golden/kvz/tiny_v1_f32.kvz
import struct
import sys

KINDS = {1: "meta", 2: "index", 3: "positions", 4: "kv", 5: "scores"}
TYPES = {1: "u64", 2: "i64", 3: "f64", 4: "string", 5: "u32[]"}


def hexline(off, chunk, note=""):
    h = " ".join(f"{b:02x}" for b in chunk)
    return f"{off:08x}  {h:<47}  {note}".rstrip()


def dump(off, data, note=""):
    """Hex lines for data starting at absolute offset off; the note goes on the first line."""
    out = []
    for i in range(0, len(data), 16):
        out.append(hexline(off + i, data[i:i + 16], note if i == 0 else ""))
    return out


def value_text(t, v):
    if t == 1:
        return str(struct.unpack("<Q", v)[0])
    if t == 2:
        return str(struct.unpack("<q", v)[0])
    if t == 3:
        return repr(struct.unpack("<d", v)[0])
    if t == 4:
        return '"' + v.decode("utf-8", "replace") + '"'
    if t == 5:
        return str(list(struct.unpack(f"<{len(v) // 4}I", v)))
    return "?"


def main(path, meta_hex_entries=3):
    b = open(path, "rb").read()
    out = ["-- Preamble (64 bytes)"]
    fields = [(0, 8, "Magic 89 'K' 'V' 'Z' 0D 0A 1A 0A"), (8, 2, "Version_Major"), (10, 2, "Version_Minor"),
              (12, 4, "Header_Flags (reserved, 0)"), (16, 8, "Section_Count"), (24, 8, "Data_Offset"),
              (32, 8, "Data_Size"), (40, 8, "Table_Checksum"), (48, 8, "Reserved (0)"), (56, 8, "Header_Checksum")]
    for off, n, name in fields:
        raw = b[off:off + n]
        val = "" if off == 0 else f" = {int.from_bytes(raw, 'little'):#x}" if off in (40, 56) else \
            f" = {int.from_bytes(raw, 'little')}"
        out.append(hexline(off, raw, name + val))
    count, data_off = struct.unpack_from("<QQ", b, 16)
    sections = []
    for i in range(count):
        e = 64 + 64 * i
        kind, flags, codec, layer, offset, stored, raw, csum = struct.unpack_from("<IIIIQQQQ", b, e)
        sections.append((kind, layer, offset, stored))
        name = KINDS.get(kind, f"kind {kind}") + (f" layer {layer}" if kind == 4 else "")
        out.append(f"-- Section table entry {i}: {name}")
        out += dump(e, b[e:e + 16], f"Kind {kind}, Flags {flags}, Codec {codec}, Layer {layer}")
        out += dump(e + 16, b[e + 16:e + 32], f"Offset {offset}, Stored_Size {stored}")
        out += dump(e + 32, b[e + 32:e + 48], f"Raw_Size {raw}, Checksum {csum:#018x}")
        out += dump(e + 48, b[e + 48:e + 64], "Reserved (0)")
    out.append(f"-- zero padding up to Data_Offset = {data_off}")
    meta = {}
    for i, (kind, layer, offset, stored) in enumerate(sections):
        start = data_off + offset
        name = KINDS.get(kind, f"kind {kind}") + (f" layer {layer}" if kind == 4 else "")
        out.append(f"-- Section {i}: {name}, data area offset {offset} (file offset {start}), {stored} bytes")
        if kind == 1:
            out += dump_meta(b, start, meta_hex_entries, meta)
        elif kind == 2:
            out += dump_index(b, start, meta)
        elif kind in (3, 5):
            if kind == 3:  # kept: the positions say which q8/q4 rows are f16 rows
                meta["_positions"] = struct.unpack_from(f"<{stored // 4}I", b, start)
            out += dump_rows(b, start, meta, "I" if kind == 3 else "f")
        elif kind == 4 and layer == 0:
            out += dump_kv(b, start, meta, layer)
        else:
            out.append(f"{start:08x}  ... {stored} bytes, laid out like layer 0")
        out.append("   (zero padding to the next multiple of 4096)")
    print("\n".join(out))


def heads(meta):
    """(layer, head, rows) in file order, from the index section already read."""
    return meta["_heads"]


def dump_index(b, start, meta):
    out, cells = [], []
    L, H = meta["model.n_layers"], meta["model.n_kv_heads"]
    for i in range(L * H):
        rows, row_start = struct.unpack_from("<QQ", b, start + 16 * i)
        cells.append((i // H, i % H, rows))
        out += dump(start + 16 * i, b[start + 16 * i:start + 16 * i + 16],
                    f"layer {i // H} head {i % H}: Row_Count {rows}, Row_Start {row_start}")
    meta["_heads"] = cells
    return out


def dump_rows(b, start, meta, fmt):
    out, at = [], start
    for layer, head, rows in heads(meta):
        vals = struct.unpack_from(f"<{rows}{fmt}", b, at)
        text = ", ".join(f"{v:g}" if fmt == "f" else str(v) for v in vals)
        out += dump(at, b[at:at + 4 * rows], f"layer {layer} head {head}: [{text}]")
        at += 4 * rows
    return out


def dump_quant_kv(b, start, meta, layer):
    """q8 (id 10) / q4 (id 11), spec §12.1: channel scales, f16 rows, group parameters, codes.
    Rows are numbered within the layer; the f16 rows have no parameters and codes. Codes are
    printed as stored (the rotated row y, before x = H y); group parameters as the scale code and
    zero point with the s and m they decode to."""
    D, H, G = meta["model.head_dim"], meta["model.n_kv_heads"], meta["kv.quant.group_size"]
    bits = 8 if meta["kv.dtype"] == 10 else 4
    below = meta["kv.quant.f16_below"]
    cells = [c for c in heads(meta) if c[0] == layer]
    first = sum(rows for l, _, rows in heads(meta) if l < layer)
    pos = meta["_positions"][first:first + sum(rows for _, _, rows in cells)]
    dense = [r for r, p in enumerate(pos) if p < below]
    quant = [r for r, p in enumerate(pos) if p >= below]
    out, at = [], start
    for part in ("K", "V"):
        for h in range(H):
            vals = struct.unpack_from(f"<{D}f", b, at)
            out += dump(at, b[at:at + 4 * D], f"{part} channel scales head {h}: " + " ".join(f"{v:g}" for v in vals))
            at += 4 * D
    for part in ("K", "V"):
        for r in dense:
            vals = struct.unpack_from(f"<{D}e", b, at)
            out += dump(at, b[at:at + 2 * D], f"{part} row {r} (f16 row): " + " ".join(f"{v:g}" for v in vals))
            at += 2 * D
    for part in ("K", "V"):
        for r in quant:
            eb = b[at:at + 2 * (D // G)]
            groups = []
            for g in range(D // G):
                e, z = eb[2 * g], eb[2 * g + 1]
                sc = (16 + e % 16) * 2.0 ** (e // 16 - 22)
                groups.append(f"e {e} z {z} (s {sc:g} m {-sc * z * 2.0 ** (bits - 8):g})")
            out += dump(at, eb, f"{part} row {r} groups: " + ", ".join(groups))
            at += 2 * (D // G)
    n = D * bits // 8
    for part in ("K", "V"):
        for r in quant:
            row = b[at:at + n]
            codes = list(row) if bits == 8 else [c for x in row for c in (x & 15, x >> 4)]
            out += dump(at, row, f"{part} row {r} codes: " + " ".join(map(str, codes)))
            at += n
    return out


def dump_kv(b, start, meta, layer):
    D, dtype = meta["model.head_dim"], meta["kv.dtype"]
    if dtype in (10, 11):
        return dump_quant_kv(b, start, meta, layer)
    if dtype != 1:
        return [f"{start:08x}  (dtype {dtype}: not decoded here)"]
    out, at = [], start
    cells = [c for c in heads(meta) if c[0] == layer]
    for part in ("K", "V"):
        for _, head, rows in cells:
            for r in range(rows):
                vals = struct.unpack_from(f"<{D}f", b, at)
                out += dump(at, b[at:at + 4 * D], f"{part} head {head} row {r}: " + " ".join(f"{v:g}" for v in vals))
                at += 4 * D
    return out


def dump_meta(b, start, hex_entries, meta):
    out = dump(start, b[start:start + 8], f"Entry_Count = {struct.unpack_from('<Q', b, start)[0]}")
    at = start + 8
    count = struct.unpack_from("<Q", b, start)[0]
    for i in range(count):
        klen = struct.unpack_from("<Q", b, at)[0]
        key = b[at + 8:at + 8 + klen].decode()
        t, _flags, vsize = struct.unpack_from("<IIQ", b, at + 8 + klen)
        v = b[at + 24 + klen:at + 24 + klen + vsize]
        end = at + 24 + klen + vsize
        note = f"{key} : {TYPES.get(t, t)} = {value_text(t, v)}"
        if t == 1:
            meta[key] = struct.unpack("<Q", v)[0]
        if i < hex_entries:
            out += dump(at, b[at:end], note)
        else:
            out.append(f"{at:08x}  ... {end - at} bytes  {note}")
        at = end
    return out


if __name__ == "__main__":
    main(sys.argv[1])
