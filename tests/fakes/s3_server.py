"""A fake S3-compatible object store on loopback, path-style (``/BUCKET/KEY``), for the
file store's bucket (``agent_core.files.bucket``) driven by the real boto3: PutObject (and
CopyObject onto itself), GetObject, HeadObject, DeleteObject, ListObjectsV2 with a prefix
and paging. Requests must carry an AWS v4 signature header; it is not checked."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from email.utils import formatdate
from xml.sax.saxutils import escape

from aiohttp import web

from tests.fakes.loopback import LoopbackServer

BUCKET = "chatgate-files"


class FakeS3(LoopbackServer):
    """Objects by (bucket, key): their bytes and when they were last written."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[tuple[str, str], tuple[bytes, float]] = {}
        self.page_size = 1000

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def settings(self) -> dict[str, str]:
        """chatgate's settings for a bucket here (and boto3's credentials)."""
        return {
            "CHATGATE_FILES_S3_BUCKET": BUCKET,
            "CHATGATE_FILES_S3_ENDPOINT": self.endpoint,
            "CHATGATE_FILES_S3_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "test-access-key",
            "AWS_SECRET_ACCESS_KEY": "test-secret-key",
        }

    def keys(self, prefix: str = "") -> list[str]:
        with self._lock:
            return sorted(key for (_b, key) in self.objects if key.startswith(prefix))

    def age(self, key: str, seconds: float) -> None:
        """Make an object look ``seconds`` older."""
        with self._lock:
            data, written = self.objects[(BUCKET, key)]
            self.objects[(BUCKET, key)] = (data, written - seconds)

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{bucket}", self._bucket)
        app.router.add_route("*", "/{bucket}/{key:.+}", self._object)

    async def _object(self, request: web.Request) -> web.StreamResponse:
        if not request.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256"):
            return _error(403, "AccessDenied")
        where = (request.match_info["bucket"], request.match_info["key"])
        self.record(f"{request.method} object", {"key": where[1]})
        if request.method == "PUT":
            source = request.headers.get("x-amz-copy-source")
            if source:
                with self._lock:
                    data, _ = self.objects[where]
                    self.objects[where] = (data, time.time())
                return web.Response(
                    text='<CopyObjectResult><ETag>"x"</ETag></CopyObjectResult>',
                    content_type="application/xml",
                )
            data = await request.read()
            with self._lock:
                self.objects[where] = (data, time.time())
            return web.Response(headers={"ETag": '"x"'})
        with self._lock:
            found = self.objects.get(where)
        if request.method == "DELETE":
            with self._lock:
                self.objects.pop(where, None)
            return web.Response(status=204)
        if found is None:
            return _error(404, "NoSuchKey", head=request.method == "HEAD")
        data, written = found
        headers = {"Content-Length": str(len(data)), "ETag": '"x"',
                   "Last-Modified": formatdate(written, usegmt=True)}  # fmt: skip
        if request.method == "HEAD":
            return web.Response(headers=headers)
        return web.Response(body=data, headers=headers)

    async def _bucket(self, request: web.Request) -> web.Response:
        if request.query.get("list-type") != "2":
            return _error(400, "InvalidRequest")
        bucket = request.match_info["bucket"]
        prefix = request.query.get("prefix", "")
        after = request.query.get("continuation-token", "")
        with self._lock:
            found = sorted(
                (key, data, written)
                for (b, key), (data, written) in self.objects.items()
                if b == bucket and key.startswith(prefix) and key > after
            )
        page, more = found[: self.page_size], len(found) > self.page_size
        contents = "".join(
            f"<Contents><Key>{escape(key)}</Key><LastModified>"
            f"{datetime.fromtimestamp(written, UTC).strftime('%Y-%m-%dT%H:%M:%S.000Z')}"
            f'</LastModified><Size>{len(data)}</Size><ETag>"x"</ETag></Contents>'
            for key, data, written in page
        )
        token = (
            f"<NextContinuationToken>{escape(page[-1][0])}</NextContinuationToken>" if more else ""
        )
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult '
            'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(page)}</KeyCount><MaxKeys>{self.page_size}</MaxKeys>"
            f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>{token}{contents}"
            "</ListBucketResult>"
        )
        return web.Response(text=body, content_type="application/xml")


def _error(status: int, code: str, *, head: bool = False) -> web.Response:
    if head:
        return web.Response(status=status)
    body = f"<Error><Code>{code}</Code><Message>{code}</Message></Error>"
    return web.Response(status=status, text=body, content_type="application/xml")
