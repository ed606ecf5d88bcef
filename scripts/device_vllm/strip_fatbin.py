"""Zero the payload of every fatbin image for another GPU architecture than the one kept, in place.

Cubins of other architectures never load on the kept one; a container's PTX is kept (for architectures up to
the kept one) where it holds no cubin of the kept architecture, so no kernel loses the only image it could
load. File size and offsets are unchanged, so the zeros compress to almost nothing.
Usage: strip_fatbin.py KEEP_SM FILE...   (KEEP_SM e.g. 90)
"""

import mmap
import struct
import subprocess
import sys

MAGIC = 0xBA55ED50


def section(path: str, name: str) -> tuple[int, int] | None:
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.replace("[ ", "[").split()
        if name in parts:
            i = parts.index(name)
            offset, size = int(parts[i + 3], 16), int(parts[i + 4], 16)
            return offset, size
    return None


def entries(buf, start: int, end: int):
    pos = start
    while pos + 16 <= end:
        magic, _version, header, fat_size = struct.unpack_from("<IHHQ", buf, pos)
        if magic != MAGIC:
            pos += 8
            continue
        images = []
        p, stop = pos + header, pos + header + fat_size
        while p < stop:
            kind, _v, hsize, padded = struct.unpack_from("<HHII", buf, p)
            sm = struct.unpack_from("<I", buf, p + 28)[0]
            images.append((kind, sm, p + hsize, padded))
            p += hsize + padded
        yield images
        pos = stop


def strip(path: str, keep: int) -> tuple[int, int]:
    found = section(path, ".nv_fatbin")
    if found is None:
        return 0, 0
    offset, size = found
    zeroed = total = 0
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as buf:
        for images in entries(buf, offset, offset + size):
            total += sum(i[3] for i in images)
            has_cubin = any(kind == 2 and sm == keep for kind, sm, _, _ in images)
            for kind, sm, start, length in images:
                # A cubin runs only on its own architecture; PTX of an older one is compiled at load time,
                # so it is kept where no cubin of the kept architecture is there.
                wanted = (kind == 2 and sm == keep) or (kind == 1 and not has_cubin and sm <= keep)
                if not wanted:
                    buf[start : start + length] = bytes(length)
                    zeroed += length
    return zeroed, total


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print(
            "usage: strip_fatbin.py KEEP_SM FILE...  (KEEP_SM: an architecture number, e.g. 90)",
            file=sys.stderr,
        )
        return 2
    keep = int(argv[0])
    for path in argv[1:]:
        try:
            zeroed, total = strip(path, keep)
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"error: {path}: expected a readable, writable ELF file ({e})", file=sys.stderr)
            return 2
        print(f"{path}: zeroed {zeroed / 1e6:.1f} of {total / 1e6:.1f} MB of fatbin")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
