"""A multipart/form-data body as the fakes read it (the Telegram Bot API's file uploads, OpenAI's
/audio/transcriptions), with the standard library's MIME parser (starlette's request.form() needs python-multipart)."""

from __future__ import annotations

import email.parser
import email.policy


def parse(content_type: str, body: bytes) -> tuple[dict[str, str], dict[str, tuple[str, bytes]]]:
    """Its fields (name -> text) and its files (name -> (filename, bytes))."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
    fields: dict[str, str] = {}
    files: dict[str, tuple[str, bytes]] = {}
    for part in message.iter_parts():
        name = str(part.get_param("name", header="content-disposition"))
        data = part.get_payload(decode=True)
        assert isinstance(data, bytes)
        if part.get_filename() is not None:
            files[name] = (str(part.get_filename()), data)
        else:
            fields[name] = data.decode()
    return fields, files
