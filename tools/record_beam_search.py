"""Record the reference's beam searches of lab 08's picture into paged_kv/lab/beam_search_recording.json.

A class's handout for lab 08 carries a package without the reference ``advance_beams`` (``autograder.editions``),
so the notebook's beam-tree cell compares the student's search with this recording instead: the choices of
every step (the beam tree) and the final beams' tokens of the package's ``beam_search`` on the tiny model.

    python -m tools.record_beam_search          # rewrite the file
    python -m tools.record_beam_search --check  # exit 1 when the file is not what the reference gives now
"""

from __future__ import annotations

import argparse
import json
import sys

# (prompt text, width, max_tokens, block_size): the searches the notebook compares (its cell lab08-given-05)
SEARCHES = (("A class definition ", 4, 12, 4),)


def recording() -> dict:
    import torch

    from paged_kv.engine.forking import beam_search
    from paged_kv.engine.model import load_tiny_model
    from paged_kv.engine.tokenizer import encode
    from paged_kv.lab.fork_lab import beam_key

    torch.set_num_threads(1)
    model = load_tiny_model()
    out = {}
    for text, width, max_tokens, block_size in SEARCHES:
        prompt = encode(text)
        results, stats = beam_search(model, prompt, width, max_tokens, block_size=block_size)
        out[beam_key(prompt, width, max_tokens, block_size)] = {
            "prompt text": text,
            "choices": [[list(c) for c in step] for step in stats.choices],
            "beams": [list(tokens) for tokens, _ in results],
        }
    return out


def render(data: dict) -> str:
    return json.dumps(data, sort_keys=True) + "\n"


def main(argv=None) -> int:
    from paged_kv.lab.fork_lab import BEAMS_RECORDED

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    text = render(recording())
    if args.check:
        same = BEAMS_RECORDED.exists() and BEAMS_RECORDED.read_text() == text
        print(
            "beam search recording up to date"
            if same
            else f"{BEAMS_RECORDED} is stale: run python -m tools.record_beam_search"
        )
        return 0 if same else 1
    BEAMS_RECORDED.write_text(text)
    print(f"wrote {BEAMS_RECORDED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
