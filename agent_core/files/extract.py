"""A document's text, read in a child process: ``python -m agent_core.files.extract KIND``
takes the document on stdin and writes its text to stdout, under limits the parent sets
(``extract``): CPU seconds, address space, wall-clock time, output size.

A document is the sender's to shape: a Word file of 200 KB can unzip to gigabytes of XML,
a workbook to millions of shared strings, a PDF can make every page draw the same huge
stream. Read in the gateway, one such file would take minutes of a thread nobody can stop
and more memory than the machine has. Here it costs a child that is killed at its limits,
and the model is told the document could not be read. Office files are also refused
before parsing when their parts unzip past ``UNZIPPED_LIMIT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import resource
import sys
import zipfile

PDF_PAGES = 200
SHEET_ROWS = 2_000
ROW_CELLS = 200
UNZIPPED_LIMIT = 64 * 1024 * 1024
OUTPUT_LIMIT = 2_000_000  # characters
CPU_SECONDS = 20
MEMORY_BYTES = 1024 * 1024 * 1024
WALL_SECONDS = 40.0
KINDS = ("pdf", "docx", "xlsx")


class ExtractionFailed(Exception):
    """The document's text could not be read (the message says why)."""


async def extract(kind: str, data: bytes) -> str:
    """The text of a ``kind`` document (see the module's text)."""
    if kind not in KINDS:
        raise ValueError(f"not a document kind: {kind!r}")
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-m",
        "agent_core.files.extract",
        kind,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=_limits,
    )
    try:
        async with asyncio.timeout(WALL_SECONDS):
            out, err = await child.communicate(data)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        await child.wait()
        raise ExtractionFailed(f"reading it took over {WALL_SECONDS:g} s") from None
    if child.returncode != 0:
        last = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        if child.returncode is not None and child.returncode < 0:
            raise ExtractionFailed("reading it went past the memory or time allowed")
        raise ExtractionFailed(last[0][:300] or f"the reader exited {child.returncode}")
    return out.decode(errors="replace")


def _limits() -> None:  # in the child, before it runs Python
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS + 1))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def pdf_text(data: bytes) -> str:
    """A PDF's text, page by page (its first ``PDF_PAGES``)."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    pages = []
    size = 0
    for number, page in enumerate(reader.pages[:PDF_PAGES], start=1):
        text = f"--- page {number} ---\n{page.extract_text() or ''}".rstrip()
        pages.append(text)
        size += len(text)
        if size > OUTPUT_LIMIT:
            break
    if len(reader.pages) > PDF_PAGES:
        pages.append(f"[... {len(reader.pages) - PDF_PAGES} more pages not read ...]")
    return "\n".join(pages)


def docx_text(data: bytes) -> str:
    """A Word document's paragraphs and tables, as plain lines."""
    import docx

    _check_zip(data)
    document = docx.Document(io.BytesIO(data))
    lines = [paragraph.text for paragraph in document.paragraphs]
    for table in document.tables:
        lines += ["\t".join(cell.text for cell in row.cells) for row in table.rows]
    return "\n".join(lines)


def xlsx_text(data: bytes) -> str:
    """A workbook's sheets as tab-separated rows (the first ``SHEET_ROWS`` of each, the
    first ``ROW_CELLS`` cells of a row)."""
    import openpyxl

    _check_zip(data)
    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        parts = []
        for sheet in book.worksheets:
            parts.append(f"--- sheet {sheet.title} ---")
            for number, row in enumerate(sheet.iter_rows(values_only=True, max_col=ROW_CELLS)):
                if number >= SHEET_ROWS:
                    parts.append(f"[... rows after {SHEET_ROWS} not read ...]")
                    break
                parts.append("\t".join("" if value is None else str(value) for value in row))
        return "\n".join(parts)
    finally:
        book.close()


def _check_zip(data: bytes) -> None:
    """Refuse an office file whose parts unzip past ``UNZIPPED_LIMIT`` (a zip bomb)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = archive.infolist()
        unzipped = sum(member.file_size for member in members)
    if unzipped > UNZIPPED_LIMIT or len(members) > 10_000:
        mb = UNZIPPED_LIMIT // (1024 * 1024)
        raise ExtractionFailed(f"it unzips to over {mb} MB")


def main() -> None:
    """The child: a document on stdin, its text on stdout."""
    kind = sys.argv[1] if len(sys.argv) > 1 else ""
    read = {"pdf": pdf_text, "docx": docx_text, "xlsx": xlsx_text}.get(kind)
    if read is None:
        sys.exit(f"not a document kind: {kind!r}")
    try:
        text = read(sys.stdin.buffer.read())
    except ExtractionFailed as exc:
        sys.exit(str(exc))
    except Exception as exc:  # the parent tells the model why, in one line
        sys.exit(f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300])
    sys.stdout.write(text[:OUTPUT_LIMIT])


if __name__ == "__main__":
    main()
