"""The file store in an S3-compatible bucket (AWS S3, MinIO, Cloudflare R2, Ceph ...), for
deployments whose gateways and workers run on different machines: every process reads the
files any of them fetched. Same contract as ``LocalBlobs``: one object per content hash
(``<prefix>files/<sha256>``), written whole or not at all; the web chat's uploads beside
them (``<prefix>uploads/<id>``).

boto3 is imported when a bucket is configured, and its calls run in threads. Credentials
come from boto3's usual chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, a profile,
an instance role). Checksums are sent only where S3 requires them, and addressing is
path-style, as the compatible stores expect.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import tempfile
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agent_core.files.blobs import HEAD_BYTES, Blob, LocalBlobs, TooLarge, checked_hash
from agent_core.settings import Settings


@dataclass(frozen=True, slots=True)
class BucketLocation:
    """Where the files go: the bucket, a key prefix, and for a store that is not AWS its
    endpoint (and region)."""

    bucket: str
    prefix: str = "chatgate/"
    endpoint: str | None = None
    region: str | None = None


class BucketBlobs:
    """Files as objects in a bucket (see the module's text); ``spool``: a local directory
    for a file while its hash is worked out (the key is the hash)."""

    def __init__(self, where: BucketLocation, *, spool: Path) -> None:
        self._where = where
        self._spool = spool
        self._client: Any = None

    def _s3(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "s3",
                endpoint_url=self._where.endpoint,
                region_name=self._where.region,
                config=Config(
                    s3={"addressing_style": "path"},
                    request_checksum_calculation="when_required",
                    response_checksum_validation="when_required",
                    retries={"max_attempts": 3, "mode": "standard"},
                ),
            )
        return self._client

    def _key(self, kind: str, name: str) -> str:
        return f"{self._where.prefix}{kind}/{name}"

    async def put(self, chunks: AsyncIterator[bytes], *, limit: int) -> Blob:
        """Spool and hash, then upload under the hash (unless it is there already)."""
        await asyncio.to_thread(self._spool.mkdir, parents=True, exist_ok=True)
        digest = hashlib.sha256()
        size = 0
        head = b""
        with tempfile.TemporaryFile(dir=self._spool) as spooled:
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise TooLarge(limit)
                digest.update(chunk)
                if len(head) < HEAD_BYTES:
                    head += chunk[: HEAD_BYTES - len(head)]
                await asyncio.to_thread(spooled.write, chunk)
            sha256 = digest.hexdigest()
            await asyncio.to_thread(spooled.seek, 0)
            await asyncio.to_thread(self._upload, self._key("files", sha256), spooled)
        return Blob(sha256, size, head)

    def _upload(self, key: str, body: Any) -> None:
        s3 = self._s3()
        if self._exists(key):
            # Copy onto itself: its time is now, for retention (as LocalBlobs touches it).
            s3.copy_object(
                Bucket=self._where.bucket,
                Key=key,
                CopySource={"Bucket": self._where.bucket, "Key": key},
                MetadataDirective="REPLACE",
            )
            return
        s3.put_object(Bucket=self._where.bucket, Key=key, Body=body)

    def _exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._s3().head_object(Bucket=self._where.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    async def read(self, sha256: str) -> bytes:
        """A stored file's bytes (``FileNotFoundError`` when it is gone)."""
        return await asyncio.to_thread(self._get, self._key("files", checked_hash(sha256)))

    def _get(self, key: str) -> bytes:
        from botocore.exceptions import ClientError

        try:
            answer = self._s3().get_object(Bucket=self._where.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise FileNotFoundError(key) from None
            raise
        body: bytes = answer["Body"].read()
        return body

    async def sweep(self, keep: Collection[str], *, older_than: float) -> int:
        """Delete the files not in ``keep`` last written over ``older_than`` seconds ago."""
        return await asyncio.to_thread(self._sweep, "files", set(keep), older_than)

    async def remove(self, sha256: str) -> bool:
        """Delete one stored file (S3 deletes are idempotent: True when it was there)."""
        key = self._key("files", checked_hash(sha256))
        if not await asyncio.to_thread(self._exists, key):
            return False
        await asyncio.to_thread(self._s3().delete_object, Bucket=self._where.bucket, Key=key)
        return True

    def _sweep(self, kind: str, keep: set[str], older_than: float) -> int:
        before = datetime.now(UTC) - timedelta(seconds=older_than)
        prefix = self._key(kind, "")
        removed = 0
        pages = self._s3().get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=self._where.bucket, Prefix=prefix):
            for found in page.get("Contents") or ():
                name = str(found["Key"])[len(prefix) :]
                if name in keep or found["LastModified"] >= before:
                    continue
                self._s3().delete_object(Bucket=self._where.bucket, Key=found["Key"])
                removed += 1
        return removed

    # -- the web chat's uploads ------------------------------------------------------

    async def put_upload(self, upload_id: str, data: Any) -> None:
        """Keep an upload (``data``: a file object at its start) under its id."""
        await asyncio.to_thread(
            self._s3().put_object,
            Bucket=self._where.bucket,
            Key=self._key("uploads", upload_id),
            Body=data,
        )

    async def read_upload(self, upload_id: str) -> bytes:
        """An upload's bytes (``FileNotFoundError`` when there is none)."""
        return await asyncio.to_thread(self._get, self._key("uploads", upload_id))

    async def remove_upload(self, upload_id: str) -> bool:
        """Delete one upload now (a person's data erased); False when it was gone."""
        key = self._key("uploads", upload_id)
        if not await asyncio.to_thread(self._exists, key):
            return False
        await asyncio.to_thread(self._s3().delete_object, Bucket=self._where.bucket, Key=key)
        return True

    async def sweep_uploads(self, older_than: float) -> int:
        """Delete uploads older than ``older_than`` seconds."""
        return await asyncio.to_thread(self._sweep, "uploads", set(), older_than)

    async def check(self) -> str:
        """Ask the bucket for one key under the prefix (``chatgate doctor``); what it is."""
        where = self._where
        await asyncio.to_thread(
            self._s3().list_objects_v2, Bucket=where.bucket, Prefix=where.prefix, MaxKeys=1
        )
        return f"s3://{where.bucket}/{where.prefix}" + (
            f" at {where.endpoint}" if where.endpoint else ""
        )

    def close(self) -> None:
        """Let go of the client's connections."""
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


def store_for(settings: Settings) -> LocalBlobs | BucketBlobs:
    """The configured file store: the bucket (``CHATGATE_FILES_S3_BUCKET``), else the
    state directory's ``files``."""
    state = settings.state_dir.resolve()
    if not settings.files_s3_bucket:
        return LocalBlobs(state / "files")
    where = BucketLocation(
        settings.files_s3_bucket,
        prefix=settings.files_s3_prefix,
        endpoint=settings.files_s3_endpoint,
        region=settings.files_s3_region,
    )
    return BucketBlobs(where, spool=state / "spool")
