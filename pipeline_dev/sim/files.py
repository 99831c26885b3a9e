"""OpenAI's Files API, in memory: upload, retrieve, list, download and delete.

The Batch API reads its input files here and writes its output and error files here.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import BodyPartReader, web

from pipeline_dev.sim.errors import documented, error_response, key_refusal, presented_key
from pipeline_dev.sim.state import STATE

MAX_UPLOAD_BYTES = 512 * 1024 * 1024  # OpenAI's limit for one file
PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
"""What a client may upload for; the server itself writes "batch_output" files."""
CHUNK_BYTES = 1024 * 1024


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int = field(default_factory=lambda: int(time.time()))

    def to_object(self) -> dict[str, Any]:
        """The File object, as OpenAI answers it (status is deprecated there, but still sent)."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
            "expires_at": None,
        }


class FileStore:
    """Every file, in upload order."""

    def __init__(self) -> None:
        self.files: dict[str, StoredFile] = {}

    def add(self, filename: str, purpose: str, content: bytes) -> StoredFile:
        stored = StoredFile(f"file-{secrets.token_hex(12)}", filename, purpose, content)
        self.files[stored.id] = stored
        return stored

    def get(self, file_id: str) -> StoredFile | None:
        return self.files.get(file_id)


FILES = web.AppKey("files", FileStore)


def no_such_file(file_id: str) -> web.Response:
    return error_response(404, f"No such File object: {file_id}", "invalid_request_error", param="id")


BATCH_API_STATUSES = (401, 403, 429, 500, 503)
"""What POST /sim/batch-api-errors may queue: the documented errors any Files or Batches API
request can meet, whatever it asks for."""


def refused_key(request: web.Request) -> web.Response | None:
    """401 for a wrong API key, as on every endpoint of the provider; else the next queued error
    (POST /sim/batch-api-errors), if any."""
    state = request.app[STATE]
    authorization = request.headers.get("Authorization", "")
    refusal = key_refusal(authorization, state.config)
    if refusal is None and state.batch_api_errors:
        key = presented_key(authorization)
        refusal = documented(
            state.batch_api_errors.popleft(), key, "requests", whole_key=state.config.echo_key
        )
    return None if refusal is None else refusal.response()


def cursor_page(items: list[dict[str, Any]], after: str | None, limit: int) -> dict[str, Any]:
    """OpenAI's list shape for `items` (in the order listed): the `limit` after the id `after`."""
    start = 0
    if after is not None:
        ids = [item["id"] for item in items]
        start = ids.index(after) + 1 if after in ids else len(items)
    page = items[start : start + limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + limit < len(items),
    }


def list_limit(request: web.Request, default: int, most: int) -> int | web.Response:
    """The `limit` query parameter within [1, most], or a 400 answer."""
    raw = request.query.get("limit")
    try:
        limit = default if raw is None else int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= most:
        message = f"Invalid 'limit': expected an integer between 1 and {most}, got {raw!r}."
        return error_response(400, message, "invalid_request_error", param="limit")
    return limit


async def _read_part(part: BodyPartReader, most: int) -> bytes | None:
    """The part's bytes, or None when it holds more than `most`."""
    chunks: list[bytes] = []
    size = 0
    while chunk := await part.read_chunk(CHUNK_BYTES):
        size += len(chunk)
        if size > most:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def create_file(request: web.Request) -> web.Response:
    """POST /v1/files (multipart: `file`, `purpose`)."""
    if (refused := refused_key(request)) is not None:
        return refused
    if not request.content_type.startswith("multipart/"):
        return error_response(400, "The request must be multipart/form-data.", "invalid_request_error")
    reader = await request.multipart()
    content: bytes | None = None
    filename = ""
    purpose: str | None = None
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            continue
        if part.name == "file":
            filename = part.filename or "upload"
            content = await _read_part(part, MAX_UPLOAD_BYTES)
            if content is None:
                message = f"File is too large: the limit is {MAX_UPLOAD_BYTES // (1024 * 1024)} MB."
                return error_response(413, message, "invalid_request_error", param="file")
        elif part.name == "purpose":
            purpose = (await part.text()).strip()
    if content is None:
        return error_response(
            400, "Missing required parameter: 'file'.", "invalid_request_error", param="file"
        )
    if purpose is None:
        message = "Missing required parameter: 'purpose'."
        return error_response(400, message, "invalid_request_error", param="purpose")
    if purpose not in PURPOSES:
        message = f"Invalid value for 'purpose': {purpose!r}. Expected one of {', '.join(PURPOSES)}."
        return error_response(400, message, "invalid_request_error", param="purpose")
    stored = request.app[FILES].add(filename, purpose, content)
    return web.json_response(stored.to_object())


async def list_files(request: web.Request) -> web.Response:
    """GET /v1/files (purpose, limit, after, order: newest first unless order=asc)."""
    if (refused := refused_key(request)) is not None:
        return refused
    limit = list_limit(request, 10_000, 10_000)
    if isinstance(limit, web.Response):
        return limit
    files = list(request.app[FILES].files.values())
    if request.query.get("order", "desc") != "asc":
        files.reverse()
    if purpose := request.query.get("purpose"):
        files = [f for f in files if f.purpose == purpose]
    page = cursor_page([f.to_object() for f in files], request.query.get("after"), limit)
    return web.json_response(page)


async def retrieve_file(request: web.Request) -> web.Response:
    """GET /v1/files/{file_id}."""
    if (refused := refused_key(request)) is not None:
        return refused
    file_id = request.match_info["file_id"]
    stored = request.app[FILES].get(file_id)
    return no_such_file(file_id) if stored is None else web.json_response(stored.to_object())


async def file_content(request: web.Request) -> web.Response:
    """GET /v1/files/{file_id}/content: the bytes as uploaded (or as the Batch API wrote them)."""
    if (refused := refused_key(request)) is not None:
        return refused
    file_id = request.match_info["file_id"]
    stored = request.app[FILES].get(file_id)
    if stored is None:
        return no_such_file(file_id)
    return web.Response(body=stored.content, content_type="application/octet-stream")


async def delete_file(request: web.Request) -> web.Response:
    """DELETE /v1/files/{file_id}."""
    if (refused := refused_key(request)) is not None:
        return refused
    file_id = request.match_info["file_id"]
    if request.app[FILES].files.pop(file_id, None) is None:
        return no_such_file(file_id)
    return web.json_response({"id": file_id, "object": "file", "deleted": True})


def setup(app: web.Application) -> FileStore:
    """The Files API's routes and store on `app`."""
    store = FileStore()
    app[FILES] = store
    app.router.add_post("/v1/files", create_file)
    app.router.add_get("/v1/files", list_files)
    app.router.add_get("/v1/files/{file_id}", retrieve_file)
    app.router.add_get("/v1/files/{file_id}/content", file_content)
    app.router.add_delete("/v1/files/{file_id}", delete_file)
    return store
