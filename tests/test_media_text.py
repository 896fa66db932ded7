"""Locations, venues, contacts, documents and stickers become short structured text the model can use, on
Telegram (real Bot API message shapes, parsed by python-telegram-bot) and WhatsApp (Twilio's form fields), and a
WhatsApp location is a turn: stored, answered, never refused."""

from __future__ import annotations

from typing import Any

from telegram import Message

from kernel.text import size_text
from surfaces import media_text
from surfaces.telegram_inbound import Allowlist, BotIdentity, classify
from surfaces.whatsapp import Form, inbound
from tests.fakes.telegram_api import BOT_ID, BOT_USERNAME, FakeBotApi

ME = BotIdentity(BOT_ID, BOT_USERNAME)


def telegram_text(**extra: Any) -> str:
    d = classify(Message.de_json(FakeBotApi().message(None, **extra), None), ME, Allowlist([]))
    assert d.action == "turn" and d.msg is not None, d
    return d.msg.text


def test_telegram_location_venue_contact_document_sticker_become_structured_text() -> None:
    assert telegram_text(location={"latitude": 39.469907, "longitude": -0.376288}) == "[location: 39.46991, -0.37629]"
    venue = {"location": {"latitude": 39.47, "longitude": -0.38}, "title": "Mercado Central",
             "address": "Plaça de la Ciutat de Bruges"}
    assert telegram_text(venue=venue, location=venue["location"]) == \
        "[venue: Mercado Central, Plaça de la Ciutat de Bruges, 39.47, -0.38]"
    assert telegram_text(contact={"phone_number": "+34600000000", "first_name": "Ana", "last_name": "Gil"}) == \
        "[contact: Ana Gil, +34600000000]"
    document = {"file_id": "BQAD", "file_unique_id": "d1", "file_name": "invoice.pdf",
                "mime_type": "application/pdf", "file_size": 122880}
    assert telegram_text(document=document) == "[document: invoice.pdf, application/pdf, 120 KB]"
    assert telegram_text(document=document, caption="pay by Friday?") == \
        "[document: invoice.pdf, application/pdf, 120 KB]\npay by Friday?"
    sticker = {"file_id": "CAAC", "file_unique_id": "s1", "type": "regular", "width": 512, "height": 512,
               "is_animated": False, "is_video": False, "emoji": "👍"}
    assert telegram_text(sticker=sticker) == "[sticker: 👍]"


def test_whatsapp_location_contact_and_document_become_structured_text() -> None:
    base = {"MessageSid": "SM1", "From": "whatsapp:+34600111222", "To": "whatsapp:+14155238886"}
    point = inbound(Form(list({**base, "Body": "", "Latitude": "39.47", "Longitude": "-0.38"}.items())))
    assert point.text == "[location: 39.47, -0.38]"
    place = inbound(Form(list({**base, "Body": "Mercado Central", "Latitude": "39.47", "Longitude": "-0.38",
                               "Label": "Mercado Central", "Address": "Plaça de la Ciutat de Bruges"}.items())))
    assert place.text == "[venue: Mercado Central, Plaça de la Ciutat de Bruges, 39.47, -0.38]"
    media = {**base, "Body": "", "NumMedia": "2", "MediaUrl0": "https://api.twilio.com/m/ME1",
             "MediaContentType0": "text/vcard", "MediaUrl1": "https://api.twilio.com/m/ME2",
             "MediaContentType1": "application/pdf"}
    assert inbound(Form(list(media.items()))).text == "[contact]\n[document: application/pdf]"
    photo = {**base, "Body": "", "NumMedia": "1", "MediaUrl0": "https://api.twilio.com/m/ME3",
             "MediaContentType0": "image/jpeg"}
    assert inbound(Form(list(photo.items()))).text == "[photo]"  # seen or noted in its turn (bot/vision.py)


def test_sizes_and_coordinates_are_short() -> None:
    assert size_text(900) == "900 B"
    assert size_text(5 * 1024 * 1024 + 1) == "5.0 MB"
    assert media_text.location("not a number", 1) == "[location: not a number, 1]"
    assert media_text.document(None, None, None) == "[document]"
