"""Every text the bot says exists in English and Spanish, with the same placeholders."""

import re

from kernel import catalog


def test_every_key_in_both_languages_with_same_placeholders() -> None:
    en, es = catalog.MESSAGES["en"], catalog.MESSAGES["es"]
    assert en.keys() == es.keys()
    for key in en:
        assert set(re.findall(r"{(\w+)}", en[key])) == set(re.findall(r"{(\w+)}", es[key])), key


def test_language_negotiation() -> None:
    assert catalog.language("es-ES,es;q=0.9,en;q=0.8") == "es"
    assert catalog.language("fr-FR,es;q=0.5") == "es"
    assert catalog.language("de") == "en"
    assert catalog.language(None) == "en"


def test_t_formats_and_falls_back_to_english() -> None:
    assert "4000" in catalog.t("message_too_long", "es", length=5000, limit=4000)
    assert catalog.t("empty_message", "xx") == catalog.MESSAGES["en"]["empty_message"]
