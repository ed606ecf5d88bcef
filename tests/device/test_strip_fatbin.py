"""scripts/device_vllm/strip_fatbin.py, run as a user runs it on an ELF file with a `.nv_fatbin` section built
here (two fatbin containers in the layout nvcc writes): in a container with a cubin for the kept architecture
every other image is zeroed; in one without, the cubins are zeroed and the PTX up to the kept architecture
stays, so the driver can still compile it. The file keeps its size, and nothing outside the images changes."""

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device_vllm" / "strip_fatbin.py"
CUBIN, PTX = 2, 1
HEADER = 64

pytestmark = pytest.mark.skipif(
    not (shutil.which("objcopy") and shutil.which("readelf")),
    reason="binutils' objcopy and readelf are needed to build and read the ELF section",
)


def image(kind: int, sm: int, fill: int, size: int = 96) -> bytes:
    head = struct.pack("<HHII", kind, 0x0101, HEADER, size) + bytes(16) + struct.pack("<I", sm)  # sm at 28
    return head + bytes(HEADER - len(head)) + bytes([fill]) * size


def container(*images: bytes) -> bytes:
    body = b"".join(images)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def images_of(data: bytes, start: int) -> list[bytes]:
    out, pos = [], start
    for _ in range(2):
        _, _, _, size = struct.unpack_from("<IHHQ", data, pos)
        p, stop = pos + 16, pos + 16 + size
        while p < stop:
            length = struct.unpack_from("<I", data, p + 8)[0]
            out.append(data[p + HEADER : p + HEADER + length])
            p += HEADER + length
        pos = stop
    return out


def test_only_what_the_kept_architecture_can_load_stays(tmp_path):
    blob = container(image(CUBIN, 90, 0x11), image(CUBIN, 80, 0x22), image(PTX, 80, 0x33)) + container(
        image(CUBIN, 80, 0x44), image(PTX, 80, 0x55), image(PTX, 100, 0x66)
    )
    (tmp_path / "fatbin").write_bytes(blob)
    lib = tmp_path / "lib.so"
    subprocess.run(
        ["objcopy", f"--add-section=.nv_fatbin={tmp_path / 'fatbin'}", sys.executable, str(lib)], check=True
    )
    before = lib.read_bytes()
    start = before.index(blob)
    done = subprocess.run([sys.executable, str(SCRIPT), "90", str(lib)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    after = lib.read_bytes()
    assert len(after) == len(before)
    kept = [0x11, None, None, None, 0x55, None]  # sm_90 cubin; PTX of sm_80 where no sm_90 cubin is
    for got, fill in zip(images_of(after, start), kept, strict=True):
        assert got == (bytes([fill]) * 96 if fill else bytes(96))
    assert after[:start] == before[:start] and after[start + len(blob) :] == before[start + len(blob) :]
    assert "zeroed" in done.stdout


def test_a_file_that_is_not_an_elf_library_is_refused_in_one_line(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a library")
    done = subprocess.run([sys.executable, str(SCRIPT), "90", str(text)], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: {text}: expected a readable, writable ELF file")
    assert text.read_text() == "not a library"
