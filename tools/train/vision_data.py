"""Generated pictures and their questions for the demo model that sees (models/k3-mini-vision).

A picture: SIZE×SIZE pixels (112: an 8×8 patch grid, 16 image tokens), white background, 1-4
shapes of one kind (circle, square, triangle) and one colour (red, green, blue, yellow, black),
each 18-30 px, placed at random without overlap. Deterministic given the seed (numpy Generator).

Questions (QUESTIONS) and their answers, e.g. for three red circles:
  "What is in the picture?"       -> "Three red circles."
  "What colour are the shapes?"   -> "Red."
  "What shape are they?"          -> "Circles."   (singular for one shape: "Circle.")
  "How many shapes are there?"    -> "Three."
Usage: python -m tools.train.vision_data OUT_DIR N SEED  (writes N PNGs and answers.json)
       python -m tools.train.vision_data --examples examples   (the README's pictures, EXAMPLES)
"""
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

SIZE = 112
COLOURS = {"red": (220, 30, 30), "green": (30, 160, 50), "blue": (30, 60, 220),
           "yellow": (235, 200, 20), "black": (20, 20, 20)}
SHAPES = ("circle", "square", "triangle")
COUNTS = ("one", "two", "three", "four")
QUESTIONS = {
    "describe": "What is in the picture?",
    "colour": "What colour are the shapes?",
    "shape": "What shape are they?",
    "count": "How many shapes are there?",
}


def plural(shape, n):
    return shape if n == 1 else shape + "s"


def answers(colour, shape, n):
    """{question type: answer text} for a picture of n shapes."""
    word = COUNTS[n - 1]
    return {
        "describe": f"{word.capitalize()} {colour} {plural(shape, n)}.",
        "colour": f"{colour.capitalize()}.",
        "shape": f"{plural(shape, n).capitalize()}.",
        "count": f"{word.capitalize()}.",
    }


def draw(colour, shape, n, rng):
    """PIL RGB image of n shapes; boxes drawn without overlap (rejection sampling)."""
    im = Image.new("RGB", (SIZE, SIZE), (255, 255, 255))
    d = ImageDraw.Draw(im)
    boxes = []
    while len(boxes) < n:
        s = int(rng.integers(18, 31))
        x, y = int(rng.integers(2, SIZE - s - 2)), int(rng.integers(2, SIZE - s - 2))
        if any(x < bx + bs + 3 and bx < x + s + 3 and y < by + bs + 3 and by < y + s + 3 for bx, by, bs in boxes):
            continue
        boxes.append((x, y, s))
    c = COLOURS[colour]
    for x, y, s in boxes:
        if shape == "circle":
            d.ellipse([x, y, x + s, y + s], fill=c)
        elif shape == "square":
            d.rectangle([x, y, x + s, y + s], fill=c)
        else:
            d.polygon([(x + s / 2, y), (x, y + s), (x + s, y + s)], fill=c)
    return im


# The committed example pictures (examples/): name -> (colour, shape, count, seed of their layout).
EXAMPLES = {
    "three_red_circles.png": ("red", "circle", 3, 9005),
    "one_blue_square.png": ("blue", "square", 1, 9002),
    "two_green_triangles.png": ("green", "triangle", 2, 9003),
    "four_yellow_circles.png": ("yellow", "circle", 4, 9004),
}


def example(name):
    colour, shape, n, seed = EXAMPLES[name]
    return draw(colour, shape, n, np.random.default_rng(seed))


def sample(rng):
    """One random picture: (PIL image, colour, shape, count)."""
    colour = list(COLOURS)[int(rng.integers(len(COLOURS)))]
    shape = SHAPES[int(rng.integers(len(SHAPES)))]
    n = int(rng.integers(1, 5))
    return draw(colour, shape, n, rng), colour, shape, n


def main(out_dir, n, seed):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    meta = {}
    for i in range(n):
        im, colour, shape, k = sample(rng)
        name = f"{COUNTS[k - 1]}_{colour}_{plural(shape, k)}.png"
        im.save(out / name)
        meta[name] = answers(colour, shape, k)
    (out / "answers.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--examples":
        Path(sys.argv[2]).mkdir(parents=True, exist_ok=True)
        for name in EXAMPLES:
            example(name).save(Path(sys.argv[2]) / name)
    else:
        main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
