"""A deterministic synthetic WebShop catalogue in exactly the original files' schema.

``generate_catalogue(out_dir, num_products, seed)`` writes ``items_shuffle.json``,
``items_ins_v2.json`` and ``items_human_ins.json``: products of 50 realistic types in five
categories (titles, bullet points, descriptions, attributes, option groups, single prices and
ranges) and human-style instructions naming attributes and options. The same seed gives the same
bytes; files are streamed, so 1M products need little more memory than one product.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memrl.envs.files import replacing
from memrl.envs.webshop.vocab import (
    BRAND_SYLLABLES,
    DESCRIPTION_SENTENCES,
    OPTION_VALUES,
    PRODUCT_TYPES,
    SIZES_BY_QUERY,
    ProductType,
)

logger = logging.getLogger(__name__)

MIN_PRODUCTS = 100
MAX_PRODUCTS = 1_000_000
_ASIN_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ASIN_MULTIPLIER = 2_654_435_761  # odd and prime to 36**8, so index -> asin is a bijection


MAX_INSTRUCTIONS_PER_PRODUCT = 10
"""Most human instructions per product (the real data has about 0.01; the default writes <= 2)."""


def default_num_instructions(num_products: int) -> int:
    """Human instructions written by default: as many as the real data (12,087), <= 2 a product."""
    return min(12_087, 2 * num_products)


def make_asin(index: int, seed: int) -> str:
    """A unique Amazon-style asin ("B0" + 8 base-36 characters) for a product index."""
    value = ((index + 1 + seed * 7_919) * _ASIN_MULTIPLIER) % 36**8
    chars = []
    for _ in range(8):
        value, digit = divmod(value, 36)
        chars.append(_ASIN_ALPHABET[digit])
    return "B0" + "".join(reversed(chars))


def _brands(rng: random.Random, count: int) -> list[str]:
    brands: set[str] = set()
    while len(brands) < count:
        n = rng.choice((2, 2, 3))
        brands.add("".join(rng.choice(BRAND_SYLLABLES) for _ in range(n)).capitalize())
    return sorted(brands)


def _title_case(phrase: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in phrase.split())


def _join_and(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _option_values(ptype: ProductType, name: str) -> tuple[str, ...]:
    return SIZES_BY_QUERY[ptype.query] if name == "size" else OPTION_VALUES[name]


class _Writer:
    """Draws products one at a time from a seeded generator."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.brands = _brands(self.rng, 400)

    def product(self, index: int) -> tuple[dict[str, Any], dict[str, Any], ProductType]:
        rng = self.rng
        ptype = PRODUCT_TYPES[rng.randrange(len(PRODUCT_TYPES))]
        asin = make_asin(index, self.seed)
        brand = rng.choice(self.brands)
        attributes = rng.sample(ptype.attributes, rng.randint(3, min(6, len(ptype.attributes))))

        options: dict[str, list[str]] = {}
        for name in ptype.options:
            if rng.random() < 0.8:
                pool = _option_values(ptype, name)
                values = rng.sample(pool, rng.randint(min(2, len(pool)), min(6, len(pool))))
                options[name] = values

        lead = _title_case(attributes[0])
        title = f"{brand} {lead} {ptype.noun}"
        if ptype.uses and rng.random() < 0.6:
            title += f" for {rng.choice(ptype.uses)}"
        if len(attributes) > 1 and rng.random() < 0.7:
            title += f" - {_title_case(attributes[1])}"
        if "size" in options and rng.random() < 0.3:
            title += f", {_title_case(options['size'][0])}"

        noun = ptype.noun.lower()
        bullets = [
            f"{a.upper()}: this {noun} is {a}, as promised by {brand}." for a in attributes[1:]
        ]
        bullets.append(
            f"WHAT YOU GET: one {noun} from {brand}. {rng.choice(DESCRIPTION_SENTENCES)}"
        )
        description = (
            f"{brand} {noun}: {_join_and(attributes[:2])}. "
            f"{rng.choice(DESCRIPTION_SENTENCES)} {rng.choice(DESCRIPTION_SENTENCES)}"
        )

        low, high = ptype.price
        price = round(rng.uniform(low, high), 2)
        if rng.random() < 0.15:
            pricing = f"${price:.2f} - ${price * rng.uniform(1.1, 1.8):.2f}"
        else:
            pricing = f"${price:.2f}"

        raw = {
            "asin": asin,
            "name": title,
            "full_description": description,
            "small_description": bullets,
            "pricing": pricing,
            "customization_options": {
                name: [{"value": v, "image": None} for v in values]
                for name, values in options.items()
            },
            "images": [],
            "category": ptype.category,
            "query": ptype.query,
            "product_category": ptype.path,
        }
        instruction_attributes = rng.sample(attributes, rng.randint(1, min(3, len(attributes))))
        ins_v2 = {
            "attributes": attributes,
            "instruction": f"i want {_join_and(instruction_attributes)} {noun}",
            "instruction_attributes": instruction_attributes,
        }
        return raw, ins_v2, ptype

    def human_instruction(
        self, raw: dict[str, Any], ins_v2: dict[str, Any], ptype: ProductType
    ) -> dict[str, Any]:
        rng = self.rng
        attrs = rng.sample(ins_v2["attributes"], rng.randint(1, min(3, len(ins_v2["attributes"]))))
        phrases, values = [], []
        for name, contents in raw["customization_options"].items():
            if rng.random() < 0.85:
                value = rng.choice(contents)["value"]
                values.append(value)
                phrases.append(
                    {
                        "color": f"in {value} color",
                        "size": f"in size {value}",
                        "scent": f"with {value} scent",
                        "flavor name": f"in {value} flavor",
                        "item package quantity": f"in a pack of {value}",
                        "capacity": f"with {value} capacity",
                    }.get(name, f"in the {value} style")
                )
        noun = ptype.noun.lower()
        attr_text = _join_and(attrs)
        template = rng.randrange(5)
        if template == 0:
            text = f"i am looking for a {attr_text} {noun}"
        elif template == 1:
            text = f"i need a {noun} that is {attr_text}"
        elif template == 2:
            text = f"find me {attr_text} {ptype.query}"
        elif template == 3:
            text = f"i want to buy a {noun} which is {attr_text}"
        else:
            text = f"looking for {attr_text} {noun} for my family"
        if phrases:
            text += " " + _join_and(phrases)
        return {"instruction": text, "instruction_attributes": attrs, "instruction_options": values}


def check_counts(num_products: int, num_instructions: int | None = None) -> int:
    """Validates a catalogue's size; returns the number of human instructions to write.

    Raises:
        ValueError: num_products outside [100, 1M], or an instruction count below 0 or above
            ``MAX_INSTRUCTIONS_PER_PRODUCT`` per product.
    """
    if not MIN_PRODUCTS <= num_products <= MAX_PRODUCTS:
        raise ValueError(
            f"num_products must be in [{MIN_PRODUCTS}, {MAX_PRODUCTS}], got {num_products}."
        )
    if num_instructions is None:
        return default_num_instructions(num_products)
    if num_instructions < 0:
        raise ValueError(f"num_instructions must be >= 0, got {num_instructions}.")
    limit = MAX_INSTRUCTIONS_PER_PRODUCT * num_products
    if num_instructions > limit:
        raise ValueError(
            f"num_instructions must be at most {MAX_INSTRUCTIONS_PER_PRODUCT} per product "
            f"({limit:,} for {num_products:,} products), got {num_instructions:,}. Ask for "
            "fewer instructions or more products."
        )
    return num_instructions


def iter_catalogue(
    num_products: int, seed: int = 0, num_instructions: int | None = None
) -> Iterator[tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]]:
    """Yields ``(product record, items_ins_v2 entry, human instructions)`` per product.

    Raises:
        ValueError: num_products or num_instructions out of range (``check_counts``).
    """
    num_instructions = check_counts(num_products, num_instructions)
    # Which products get how many human instructions: spread evenly, then shuffled by seed.
    counts = [num_instructions // num_products] * num_products
    for i in random.Random(seed + 1).sample(range(num_products), num_instructions % num_products):
        counts[i] += 1
    writer = _Writer(seed)
    for index in range(num_products):
        raw, ins_v2, ptype = writer.product(index)
        human = [writer.human_instruction(raw, ins_v2, ptype) for _ in range(counts[index])]
        yield raw, ins_v2, human


def generate_catalogue(
    out_dir: str | Path, num_products: int, seed: int = 0, num_instructions: int | None = None
) -> dict[str, Path]:
    """Writes the three WebShop files of a synthetic catalogue into ``out_dir``.

    The counts are checked before anything is written, and the files are written aside and
    renamed over those in ``out_dir`` only when all three are complete.

    Returns:
        ``{"products": ..., "attributes": ..., "human": ...}`` paths.

    Raises:
        ValueError: num_products or num_instructions out of range (``check_counts``), or
            ``out_dir`` or a folder above it is a file.
    """
    check_counts(num_products, num_instructions)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{str(out)!r} is a file; give a folder for the catalogue.")
    paths = {
        "products": out / "items_shuffle.json",
        "attributes": out / "items_ins_v2.json",
        "human": out / "items_human_ins.json",
    }
    with (
        replacing(*paths.values()) as (products, attributes, human),
        open(products, "w", encoding="utf-8") as fp,
        open(attributes, "w", encoding="utf-8") as fa,
        open(human, "w", encoding="utf-8") as fh,
    ):
        fp.write("[\n")
        fa.write("{\n")
        fh.write("{\n")
        first_h = True
        for i, (raw, ins_v2, human) in enumerate(
            iter_catalogue(num_products, seed, num_instructions)
        ):
            sep = "" if i == 0 else ",\n"
            fp.write(sep + json.dumps(raw))
            fa.write(f"{sep}{json.dumps(raw['asin'])}: {json.dumps(ins_v2)}")
            if human:
                fh.write(
                    ("" if first_h else ",\n") + f"{json.dumps(raw['asin'])}: " + json.dumps(human)
                )
                first_h = False
        fp.write("\n]\n")
        fa.write("\n}\n")
        fh.write("\n}\n")
    logger.info("Wrote a synthetic WebShop catalogue of %d products to %s", num_products, out)
    return paths
