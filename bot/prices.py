"""The price table: what a model call costs, in USD, from its tokens (docs/costs.md).

    table = PriceTable.parse(settings_value)          # HILO_PRICES over the defaults; ConfigError when malformed
    table.cost("openai", "gpt-4o-mini", tokens_in=1200, tokens_out=300)   # 0.00036

Prices are USD per million tokens: input, output and cached input (input tokens the provider read from its prompt
cache: OpenAI caches long prompt prefixes by itself, Anthropic the prefix hilo marks; without a "cached" price
they cost the input price). The defaults are the providers' list prices for the models hilo's defaults and docs
name (and their close relatives); HILO_PRICES adds or replaces entries, as a JSON object or the path of a JSON or
TOML file: `{"gpt-4o-mini": {"in": 0.15, "out": 0.6, "cached": 0.075}}`. A key is a model name or a
`provider:model` label (the label wins). A dated snapshot (`gpt-4o-mini-2024-07-18`) takes the price of its
longest listed prefix. The offline echo model costs 0; a model the table does not know costs 0 and is logged once
(`cost.unpriced`) so the operator can price it.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bot import config_file
from kernel import log
from kernel.errors import ConfigError

logger = log.get("hilo.prices")


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens; `cached`: of the input, a token read from the provider's prompt cache (None: the
    input price)."""

    input: float
    output: float
    cached: float | None = None

    def cost(self, tokens_in: int, tokens_out: int, tokens_cached: int = 0) -> float:
        """`tokens_in` counts every input token, `tokens_cached` those of them read from the cache."""
        cached = min(max(tokens_cached, 0), tokens_in)
        cached_price = self.input if self.cached is None else self.cached
        return ((tokens_in - cached) * self.input + cached * cached_price + tokens_out * self.output) / 1_000_000


#: List prices (USD per million tokens, input / output) of the models hilo's defaults and docs name, and of
#: their close relatives. Check them against the provider's price page and override with HILO_PRICES.
#: Cached input: OpenAI's list prices for cached input; Anthropic's cache reads (a tenth of the input price; its
#: cache writes, 1.25x the input price for five minutes, are counted at the input price).
DEFAULTS: dict[str, Price] = {
    "gpt-4o-mini": Price(0.15, 0.60, 0.075),
    "gpt-4o": Price(2.50, 10.00, 1.25),
    "gpt-4.1-mini": Price(0.40, 1.60, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, 0.025),
    "gpt-4.1": Price(2.00, 8.00, 0.50),
    "claude-3-5-haiku": Price(0.80, 4.00, 0.08),
    "claude-3-haiku": Price(0.25, 1.25, 0.03),
    "claude-3-5-sonnet": Price(3.00, 15.00, 0.30),
    "claude-3-7-sonnet": Price(3.00, 15.00, 0.30),
    "claude-sonnet-4": Price(3.00, 15.00, 0.30),
    "echo": Price(0.0, 0.0),
}
FREE = Price(0.0, 0.0)
EXAMPLE = '{"gpt-4o-mini": {"in": 0.15, "out": 0.6}}'


@dataclass(frozen=True)
class PriceTable:
    """Model name (or `provider:model`) -> Price. Immutable; `cost` and `price_of` are safe from any thread."""

    prices: Mapping[str, Price] = field(default_factory=lambda: dict(DEFAULTS))
    _unpriced: set[str] = field(default_factory=set, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @classmethod
    def parse(cls, raw: str) -> PriceTable:
        """HILO_PRICES (a JSON object, or the path of a .json / .toml file) over the defaults."""
        raw = raw.strip()
        if not raw:
            return cls()
        return cls({**DEFAULTS, **_entries(config_file.load(raw, "HILO_PRICES", EXAMPLE))})

    def price_of(self, provider: str, model: str) -> Price | None:
        """The model's price: its `provider:model` label, its name, then its name's longest listed prefix."""
        if provider == "echo":
            return self.prices.get("echo", FREE)
        for key in (f"{provider}:{model}", model):
            if key in self.prices:
                return self.prices[key]
        prefixes = [k for k in self.prices if model.startswith(k + "-") or model.startswith(f"{provider}:{k}-")]
        return self.prices[max(prefixes, key=len)] if prefixes else None

    def cost(self, provider: str, model: str, tokens_in: int, tokens_out: int, tokens_cached: int = 0) -> float:
        """What a call cost in USD; 0 for a model the table does not know (logged once per model)."""
        price = self.price_of(provider, model)
        if price is None:
            self._warn(provider, model)
            return 0.0
        return price.cost(tokens_in, tokens_out, tokens_cached)

    def _warn(self, provider: str, model: str) -> None:
        label = f"{provider}:{model}"
        with self._lock:
            if label in self._unpriced:
                return
            self._unpriced.add(label)
        logger.warning("cost.unpriced", model=label,
                       fix='add it to HILO_PRICES, e.g. {"' + model + '": {"in": 0.15, "out": 0.6}}')


def _entries(data: Any) -> dict[str, Price]:
    if not isinstance(data, dict) or not data:
        raise ConfigError('HILO_PRICES must be an object of model -> {"in": usd_per_mtok, "out": usd_per_mtok}')
    entries: dict[str, Price] = {}
    for model, value in data.items():
        if not isinstance(value, dict) or not {"in", "out"} <= set(value) <= {"in", "out", "cached"}:
            raise ConfigError(f'HILO_PRICES: {model!r} must be {{"in": usd_per_mtok, "out": usd_per_mtok}} '
                              f'(and optionally "cached": usd_per_mtok), got {json.dumps(value, default=str)[:80]}')
        numbers = [value["in"], value["out"], *([value["cached"]] if "cached" in value else [])]
        if not all(isinstance(n, int | float) and not isinstance(n, bool) and math.isfinite(n) and n >= 0
                   for n in numbers):
            raise ConfigError(f"HILO_PRICES: {model!r}: the prices must be numbers of 0 or more (USD per million "
                              "tokens)")
        entries[str(model).strip()] = Price(float(numbers[0]), float(numbers[1]),
                                            float(numbers[2]) if len(numbers) > 2 else None)
    return entries
