"""The file store in an S3-compatible bucket, with the real boto3 against a fake bucket on
loopback: one object per content hash, a second copy of the same bytes only touches it,
reading, the sweep (what retention keeps stays, paging through a long listing), uploads
beside the files, and refusing a name that is not a hash."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agent_core.files.blobs import TooLarge
from agent_core.files.bucket import BucketBlobs, BucketLocation
from tests.fakes.s3_server import BUCKET, FakeS3


@pytest.fixture
def s3() -> Iterator[FakeS3]:
    with FakeS3() as server:
        yield server


@pytest.fixture
def bucket(s3: FakeS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[BucketBlobs]:
    for name, value in s3.settings().items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    where = BucketLocation(BUCKET, prefix="team/", endpoint=s3.endpoint, region="us-east-1")
    blobs = BucketBlobs(where, spool=tmp_path / "spool")
    yield blobs
    blobs.close()


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_one_object_per_content_and_reading_it_back(bucket: BucketBlobs, s3: FakeS3) -> None:
    data = os.urandom(300_000)
    first = await bucket.put(_chunks(data[:1000], data[1000:]), limit=1_000_000)
    assert first.sha256 == hashlib.sha256(data).hexdigest()
    assert first.size == len(data)
    assert first.head == data[:8192]
    key = f"team/files/{first.sha256}"
    assert s3.keys() == [key]
    s3.age(key, 3600)
    again = await bucket.put(_chunks(data), limit=1_000_000)
    assert again == first
    assert s3.keys() == [key]
    assert len([c for c in s3.called("PUT object") if c["key"] == key]) == 2  # put, then a touch
    assert await bucket.read(first.sha256) == data
    with pytest.raises(FileNotFoundError):
        await bucket.read("0" * 64)
    with pytest.raises(ValueError, match="not a SHA-256"):
        await bucket.read("../uploads/x")
    with pytest.raises(TooLarge):
        await bucket.put(_chunks(b"x" * 11), limit=10)
    assert s3.keys() == [key]


async def test_the_sweep_keeps_what_is_used_or_recent_across_pages(
    bucket: BucketBlobs, s3: FakeS3
) -> None:
    s3.page_size = 2
    kept = await bucket.put(_chunks(b"in use"), limit=100)
    recent = await bucket.put(_chunks(b"recent"), limit=100)
    old = [await bucket.put(_chunks(f"old {i}".encode()), limit=100) for i in range(3)]
    for blob in (kept, *old):
        s3.age(f"team/files/{blob.sha256}", 40 * 86400)
    assert await bucket.sweep({kept.sha256}, older_than=30 * 86400) == 3
    assert s3.keys() == sorted(f"team/files/{b.sha256}" for b in (kept, recent))


async def test_uploads_sit_beside_the_files(bucket: BucketBlobs, s3: FakeS3) -> None:
    await bucket.put_upload("a" * 32, io.BytesIO(b"region,revenue\n"))
    assert await bucket.read_upload("a" * 32) == b"region,revenue\n"
    assert s3.keys("team/uploads/") == ["team/uploads/" + "a" * 32]
    s3.age("team/uploads/" + "a" * 32, 2 * 86400)
    assert await bucket.sweep_uploads(86400) == 1
    assert s3.keys() == []


async def test_doctor_asks_the_bucket(bucket: BucketBlobs, s3: FakeS3) -> None:
    assert await bucket.check() == f"s3://{BUCKET}/team/ at {s3.endpoint}"
    assert s3.called("GET object") == []  # a listing, not a read
