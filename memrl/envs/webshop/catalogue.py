"""The WebShop catalogue: loading the original files (or synthetic ones in the same schema).

Files (the WebShop benchmark's data format): ``items_shuffle*.json`` (a list of scraped products),
``items_ins_v2*.json`` (asin -> attributes and a synthetic instruction) and ``items_human_ins.json``
(asin -> human instructions). ``load_catalogue`` validates every record it uses and turns it into
the product dict the engine and the reward read (``Title``, ``BulletPoints``, ``Description``,
``Attributes``, ``options``, ``pricing``, ``Price``...), as the original loader does.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_PRICE = 100.0
"""Price of a product without pricing (as in the original)."""
DUMMY_ATTRIBUTE = "DUMMY_ATTR"
"""Attribute list of a product missing from items_ins_v2 (as in the original)."""

FILE_PATTERNS = {
    "products": "items_shuffle*.json",
    "attributes": "items_ins_v2*.json",
    "human": "items_human_ins*.json",
}


@dataclass
class Catalogue:
    """Products with their prices, indexed by asin."""

    products: list[dict[str, Any]]
    """Processed product dicts, in file order (asins unique)."""
    prices: dict[str, float]
    """asin -> the price paid (a seeded uniform draw inside a price range)."""
    source: str = ""
    """Where the catalogue came from (directory or ``synthetic(...)``)."""
    by_asin: dict[str, dict[str, Any]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_asin = {p["asin"]: p for p in self.products}

    def __len__(self) -> int:
        return len(self.products)

    def product(self, asin: str) -> dict[str, Any]:
        """The product of an asin (upper-case, as shown on result pages)."""
        try:
            return self.by_asin[asin]
        except KeyError:
            raise KeyError(
                f"No product with asin {asin!r} in the catalogue ({self.source})"
            ) from None

    def documents(self) -> Iterator[str]:
        """Search documents, one per product, in product order (see ``product_document``)."""
        return (product_document(p) for p in self.products)


def product_document(product: dict[str, Any]) -> str:
    """``title + description + first bullet + "name: v1, and v2, and ..."`` lower-cased."""
    option_text = ", and ".join(
        f"{name}: {', and '.join(values)}" for name, values in product["options"].items()
    )
    bullets = product["BulletPoints"]
    first_bullet = bullets[0] if bullets else ""
    return " ".join([product["Title"], product["Description"], first_bullet, option_text]).lower()


def find_data_files(data_dir: str | Path) -> dict[str, Path | None]:
    """Finds the three WebShop files in a directory.

    Where several files match a pattern, the shortest name wins (``items_shuffle.json`` over
    ``items_shuffle_1000.json``); pass explicit paths to ``load_catalogue`` to choose otherwise.

    Raises:
        FileNotFoundError: no directory, or no products file in it.
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise FileNotFoundError(
            f"WebShop data directory {str(root)!r} does not exist. Point data_dir at the folder "
            "holding items_shuffle*.json, or write a synthetic one with `memrl data webshop`."
        )
    found: dict[str, Path | None] = {}
    for key, pattern in FILE_PATTERNS.items():
        matches = sorted(root.glob(pattern), key=lambda p: (len(p.name), p.name))
        found[key] = matches[0] if matches else None
    if found["products"] is None:
        raise FileNotFoundError(
            f"No {FILE_PATTERNS['products']} in {str(root)!r} (it holds: "
            f"{sorted(p.name for p in root.iterdir())[:20]}). Add the products file or run "
            "`memrl data webshop --output DIR` to write a synthetic catalogue."
        )
    return found


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"WebShop file {str(path)!r} does not exist.")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{path}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}). "
            "Re-download or regenerate the file."
        ) from err
    except RecursionError:
        raise ValueError(
            f"{path}: JSON nested too deeply to read (WebShop files are a list or a mapping of "
            "flat records). Re-download or regenerate the file."
        ) from None


class _RecordError(ValueError):
    pass


def _bad(path: Path, where: str, problem: str) -> ValueError:
    return _RecordError(f"{path}: {where}: {problem}. Fix or remove that record.")


def _parse_pricing(text: str, path: Path, where: str) -> list[float]:
    try:
        prices = [float(re.sub(r"[^\d.]", "", part)) for part in text.split("$")[1:]]
    except ValueError:
        prices = []
    if not prices:
        raise _bad(
            path, where, f"field 'pricing' must look like '$12.99' or '$5.99 - $9.99', got {text!r}"
        )
    return prices[:2]


def _process_product(raw: Any, path: Path, index: int) -> dict[str, Any] | None:
    where = f"record {index}"
    if not isinstance(raw, dict):
        raise _bad(path, where, f"expected an object, got {type(raw).__name__}")
    asin = raw.get("asin")
    if not isinstance(asin, str):
        raise _bad(path, where, f"field 'asin' must be a string, got {asin!r}")
    if asin == "nan" or len(asin) > 10:
        return None
    where = f"record {index} (asin {asin!r})"
    for key in ("name", "category", "query", "product_category"):
        if not isinstance(raw.get(key), str):
            raise _bad(path, where, f"field {key!r} must be a string, got {raw.get(key)!r}")
    description = raw.get("full_description") or ""
    if not isinstance(description, str):
        raise _bad(path, where, f"field 'full_description' must be a string, got {description!r}")
    bullets = raw.get("small_description") or []
    if isinstance(bullets, str):
        bullets = [bullets]
    if not isinstance(bullets, list) or not all(isinstance(b, str) for b in bullets):
        raise _bad(
            path,
            where,
            f"field 'small_description' must be a string or a list of strings, got {bullets!r}",
        )
    pricing_text = raw.get("pricing")
    if not pricing_text:
        pricing, price_tag = [DEFAULT_PRICE], f"${DEFAULT_PRICE}"
    elif not isinstance(pricing_text, str):
        raise _bad(path, where, f"field 'pricing' must be a string, got {pricing_text!r}")
    else:
        pricing = _parse_pricing(pricing_text, path, where)
        price_tag = f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"
    custom = raw.get("customization_options") or {}
    if not isinstance(custom, dict):
        raise _bad(path, where, f"field 'customization_options' must be an object, got {custom!r}")
    options: dict[str, list[str]] = {}
    option_to_image: dict[str, str | None] = {}
    for option_name, contents in custom.items():
        if contents is None:
            continue
        if not isinstance(contents, list):
            raise _bad(
                path,
                where,
                f"option {option_name!r} must be a list of "
                f"{{value, image}} objects, got {contents!r}",
            )
        values = []
        for content in contents:
            if not isinstance(content, dict) or not isinstance(content.get("value"), str):
                raise _bad(
                    path,
                    where,
                    f"option {option_name!r} has an entry without a string 'value': {content!r}",
                )
            value = content["value"].strip().replace("/", " | ").lower()
            values.append(value)
            option_to_image[value] = content.get("image")
        options[option_name.lower()] = values
    images = raw.get("images") or []
    if not isinstance(images, list):
        raise _bad(path, where, f"field 'images' must be a list, got {images!r}")
    return {
        "asin": asin,
        "name": raw["name"],
        "Title": raw["name"],
        "Description": description,
        "BulletPoints": bullets,
        "category": raw["category"],
        "query": raw["query"].lower().strip(),
        "product_category": raw["product_category"],
        "pricing": pricing,
        "Price": price_tag,
        "options": options,
        "option_to_image": option_to_image,
        "MainImage": images[0] if images else None,
        "Rating": "N.A.",
        "Reviews": [],
        "Attributes": [DUMMY_ATTRIBUTE],
    }


def _check_attributes(entry: Any, path: Path, asin: str) -> dict[str, Any]:
    where = f"record for asin {asin!r}"
    if not isinstance(entry, dict):
        raise _bad(path, where, f"expected an object, got {type(entry).__name__}")
    attrs = entry.get("attributes", [])
    if not isinstance(attrs, list) or not all(isinstance(a, str) for a in attrs):
        raise _bad(path, where, f"field 'attributes' must be a list of strings, got {attrs!r}")
    ins_attrs = entry.get("instruction_attributes")
    if ins_attrs is not None and (
        not isinstance(ins_attrs, list) or not all(isinstance(a, str) for a in ins_attrs)
    ):
        raise _bad(
            path,
            where,
            f"field 'instruction_attributes' must be a list of strings, got {ins_attrs!r}",
        )
    ins = entry.get("instruction")
    if ins is not None and not isinstance(ins, str):
        raise _bad(path, where, f"field 'instruction' must be a string, got {ins!r}")
    return entry


def _check_human(entries: Any, path: Path, asin: str) -> list[dict[str, Any]]:
    where = f"record for asin {asin!r}"
    if not isinstance(entries, list):
        raise _bad(path, where, f"expected a list of instructions, got {type(entries).__name__}")
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get("instruction"), str):
            raise _bad(
                path, f"{where}, instruction {i}", f"needs a string 'instruction', got {e!r}"
            )
        attrs = e.get("instruction_attributes")
        if not isinstance(attrs, list) or not all(isinstance(a, str) for a in attrs):
            raise _bad(
                path,
                f"{where}, instruction {i}",
                f"'instruction_attributes' must be a list of strings, got {attrs!r}",
            )
        opts = e.get("instruction_options", [])
        if not isinstance(opts, list | dict):
            raise _bad(
                path,
                f"{where}, instruction {i}",
                f"'instruction_options' must be a list or an object, got {opts!r}",
            )
    return entries


def load_catalogue(
    data_dir: str | Path | None = None,
    *,
    products_path: str | Path | None = None,
    attributes_path: str | Path | None = None,
    human_path: str | Path | None = None,
    num_products: int | None = None,
    price_seed: int = 0,
) -> Catalogue:
    """Loads a catalogue from the original files (or synthetic ones in the same schema).

    Args:
        data_dir: directory holding the files (found with ``find_data_files``); explicit paths
            below override what is found there.
        products_path, attributes_path, human_path: explicit file paths.
        num_products: keep only the first N products of the products file (as the original).
        price_seed: seed of the price drawn inside each price range.

    Raises:
        FileNotFoundError: a file or the directory is missing.
        ValueError: a file is not JSON or a record is malformed (the message names both).
    """
    found: dict[str, Path | None] = {"products": None, "attributes": None, "human": None}
    if data_dir is not None:
        found = find_data_files(data_dir)
    for key, explicit in (
        ("products", products_path),
        ("attributes", attributes_path),
        ("human", human_path),
    ):
        if explicit is not None:
            found[key] = Path(explicit)
    if found["products"] is None:
        raise ValueError(
            "load_catalogue needs data_dir or products_path (got neither). Pass the folder of "
            "items_shuffle*.json, or generate one with `memrl data webshop --output DIR`."
        )
    products_file = found["products"]
    raw_products = _read_json(products_file)
    attributes = _read_json(found["attributes"]) if found["attributes"] is not None else None
    human = _read_json(found["human"]) if found["human"] is not None else None
    source = str(data_dir) if data_dir is not None else str(products_file)
    return catalogue_from_records(
        raw_products,
        attributes,
        human,
        num_products=num_products,
        price_seed=price_seed,
        source=source,
        files=(products_file, found["attributes"], found["human"]),
    )


def catalogue_from_records(
    raw_products: Any,
    attributes: Any = None,
    human: Any = None,
    *,
    num_products: int | None = None,
    price_seed: int = 0,
    source: str = "records",
    files: tuple[Path | None, Path | None, Path | None] = (None, None, None),
) -> Catalogue:
    """Builds a catalogue from the parsed contents of the three files (see ``load_catalogue``).

    ``files`` names the files the records came from, for error messages.
    """
    products_file = files[0] or Path("<items_shuffle records>")
    if not isinstance(raw_products, list):
        raise ValueError(
            f"{products_file}: expected a JSON list of products, got "
            f"{type(raw_products).__name__}. Is this an items_shuffle file?"
        )
    if num_products is not None:
        raw_products = raw_products[:num_products]
    products: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_products):
        product = _process_product(raw, products_file, i)
        if product is None or product["asin"] in seen:
            continue
        seen.add(product["asin"])
        products.append(product)

    if attributes is not None:
        attr_file = files[1] or Path("<items_ins_v2 records>")
        if not isinstance(attributes, dict):
            raise ValueError(
                f"{attr_file}: expected an object asin -> attributes, got "
                f"{type(attributes).__name__}"
            )
        for p in products:
            entry = attributes.get(p["asin"])
            if entry is None:
                continue
            entry = _check_attributes(entry, attr_file, p["asin"])
            if "attributes" in entry:
                p["Attributes"] = entry["attributes"]
            p["instruction_text"] = entry.get("instruction")
            p["instruction_attributes"] = entry.get("instruction_attributes")

    if human is not None:
        human_file = files[2] or Path("<items_human_ins records>")
        if not isinstance(human, dict):
            raise ValueError(
                f"{human_file}: expected an object asin -> list of instructions, "
                f"got {type(human).__name__}"
            )
        for p in products:
            entries = human.get(p["asin"])
            if entries is not None:
                p["instructions"] = _check_human(entries, human_file, p["asin"])

    rng = random.Random(price_seed)
    prices = {
        p["asin"]: p["pricing"][0] if len(p["pricing"]) == 1 else rng.uniform(*p["pricing"][:2])
        for p in products
    }
    logger.info("Loaded %d WebShop products from %s", len(products), source)
    return Catalogue(products=products, prices=prices, source=source)
