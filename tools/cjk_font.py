"""Build the CJK font the course package ships for its pictures in Chinese: a subset of Noto Sans CJK SC.

matplotlib's own font (DejaVu Sans) has no Chinese glyphs, and Colab's or ModelScope's images may have no CJK font,
so ``paged_kv/lab/fonts/course-cjk-sans-sc.otf`` holds the glyphs of every character outside ASCII that the
translations the package reads use (``paged_kv/lab/locale/*/LC_MESSAGES/paged_kv_course.mo``), plus the common
CJK punctuation, and nothing else: about 200 bytes a character. Rerun after translations add characters (the
test ``tests/lab/test_i18n_pictures.py`` names any character without a glyph):

    sudo apt-get install fonts-noto-cjk      # Debian's Noto CJK (bookworm: 1:20220127+repack1-1, fonts 2.004)
    python -m tools.cjk_font

The source is the Simplified Chinese face of Debian's ``NotoSansCJK-Regular.ttc``, under the SIL Open Font
License 1.1 (``paged_kv/lab/fonts/OFL.txt``). The subset is renamed (``PagedKV CJK Sans SC``): a modified
version keeps the licence and copyright but not the original's name. fontTools (a dependency of matplotlib) cuts
it; the run is reproducible (the same characters give the same bytes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterable, Set

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from paged_kv.lab.figure import FONT_FAMILY, FONT_FILE  # noqa: E402
from paged_kv.lab.i18n import SUPPORTED, SOURCE, catalog_path  # noqa: E402

SOURCE_FONT = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")
SOURCE_INDEX_NAME = "Noto Sans CJK SC"  # the face of the collection that is Simplified Chinese
PUNCTUATION = "，。、；：？！“”‘’（）《》【】—…·～％＋－＝／｜＜＞"  # a translator's usual signs, whatever is used yet


def translated_texts() -> Iterable[str]:
    """Every translation the package reads at run time (all languages but English)."""
    import gettext

    for language in SUPPORTED:
        if language == SOURCE:
            continue
        with open(catalog_path(language), "rb") as handle:
            yield from (v for k, v in gettext.GNUTranslations(handle)._catalog.items() if k)


def characters(texts: Iterable[str]) -> Set[str]:
    """The characters outside ASCII in ``texts``, and the CJK punctuation."""
    return {c for text in texts for c in text if ord(c) > 0x7E} | set(PUNCTUATION)


def _face(collection):
    for font in collection.fonts:
        if font["name"].getDebugName(4) == SOURCE_INDEX_NAME:
            return font
    raise SystemExit(f"{SOURCE_FONT} has no face named {SOURCE_INDEX_NAME!r}")


def build(chars: Set[str], source: Path = SOURCE_FONT, target: Path = FONT_FILE) -> int:
    """Write the subset of ``source`` holding ``chars`` (those it has) to ``target``; returns its size in bytes."""
    from fontTools import subset
    from fontTools.ttLib import TTCollection

    if not source.exists():
        raise SystemExit(f"{source} is missing: install Debian's fonts-noto-cjk (apt-get install fonts-noto-cjk)")
    font = _face(TTCollection(str(source)))
    have = set(font.getBestCmap())
    options = subset.Options()
    options.layout_features = []  # horizontal text only: no vertical forms, no locale substitutions
    options.hinting = False
    options.desubroutinize = True
    options.name_IDs = ["*"]
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=sorted(ord(c) for c in chars if ord(c) in have))
    subsetter.subset(font)
    names = font["name"]
    for record in list(names.names):
        if record.nameID in (1, 3, 4, 6, 16, 17, 21, 22):
            names.removeNames(nameID=record.nameID)
    postscript = FONT_FAMILY.replace(" ", "") + "-Regular"
    names.setName(FONT_FAMILY, 1, 3, 1, 0x409)
    names.setName(f"{postscript};subset of Noto Sans CJK SC 2.004", 3, 3, 1, 0x409)
    names.setName(FONT_FAMILY, 4, 3, 1, 0x409)
    names.setName(postscript, 6, 3, 1, 0x409)
    names.setName(
        "A subset of Noto Sans CJK SC (Debian fonts-noto-cjk 1:20220127+repack1-1), renamed; SIL Open Font "
        "License 1.1.",
        10,
        3,
        1,
        0x409,
    )
    font["CFF "].cff.fontNames = [postscript]
    font.recalcTimestamp = False
    target.parent.mkdir(parents=True, exist_ok=True)
    font.save(str(target))
    return target.stat().st_size


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=SOURCE_FONT)
    args = parser.parse_args(argv)
    chars = characters(translated_texts())
    size = build(chars, args.source)
    print(f"wrote {FONT_FILE.relative_to(ROOT)}: {len(chars)} characters, {size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
