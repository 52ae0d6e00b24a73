"""Real files for tests, made here: a PNG, a PDF with a line of text, a Word document, a
workbook, a WAV; each the bytes a person would send."""

from __future__ import annotations

import io
import struct
import wave
import zlib


def png(width: int = 4, height: int = 3, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A small solid-colour PNG."""
    row = b"\x00" + bytes(rgb) * width
    raw = row * height

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def pdf(*lines: str) -> bytes:
    """A one-page PDF whose text is ``lines`` (Helvetica), with a correct cross-reference."""
    text = (
        "BT /F1 12 Tf 72 720 Td 14 TL "
        + " ".join(f"({line.replace('(', '[').replace(')', ']')}) '" for line in lines)
        + " ET"
    )
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(text), text.encode()),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    )
    return out.getvalue()


def docx(*paragraphs: str) -> bytes:
    """A Word document with these paragraphs."""
    import docx as python_docx

    document = python_docx.Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def xlsx(rows: list[list[object]]) -> bytes:
    """A workbook with one sheet of ``rows``."""
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    for row in rows:
        sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def wav(seconds: float = 0.5, rate: int = 8000) -> bytes:
    """Silence, as a WAV file (what a voice note is, to a sniffer)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(2)
        sound.setframerate(rate)
        sound.writeframes(b"\x00\x00" * int(seconds * rate))
    return out.getvalue()


def ogg(size: int = 512) -> bytes:
    """The start of an Ogg stream (a Telegram voice note is Opus in Ogg): what a sniffer
    and a transcription endpoint are shown."""
    return b"OggS\x00\x02" + bytes(size - 6)
