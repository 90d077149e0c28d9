"""PrairieLearn's external grader: the image recipe and the question an instructor copies.

`autograder --prairielearn DIR` writes two folders. `image/` is what `docker build` needs: the
Dockerfile (Python, the CPU build of torch, the tutor from its wheel, and a folder pack when
there is one) and the wheel. `questions/backprop/` goes into the course's `questions/`: its
`info.json` names the image, the entrypoint and the timeout (`externalGradingOptions`),
`question.html` takes the upload and shows the results, and `tests/grading.json` holds the
grading rules, which PrairieLearn mounts at `/grade/tests/` for `autograder --run prairielearn`.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

from tutor.course.bundle import PACK_FOLDER, TORCH_INDEX, TORCH_VERSION
from tutor.course.rules import CONFIG_NAME, GradingRules, rules_json
from tutor.course.scoring import TRAIN_STEPS
from tutor.pack.model import Pack

HERE = Path(__file__).resolve().parent
IMAGE = "backprop-tutor-grader"  # a placeholder: the name the instructor pushes the image as
QUESTION = "backprop"
# Where pip puts the tutor's command in the python image, and where a folder pack goes there.
TOOL = "/usr/local/bin/backprop-tutor"
PACK_HOME = f"/opt/backprop-tutor/{PACK_FOLDER}"
# The hosted graders stop a job after at most this long (PrairieLearn's documented limit).
MAX_TIMEOUT = 600
BASE_TIMEOUT = 300  # the checks and a TRAIN_STEPS run, with room for a slow grader


def entrypoint(pack: Pack, folder_pack: bool) -> list[str]:
    """The command the container runs; as a list, so no shell reads it."""
    return [TOOL, "--pack", PACK_HOME if folder_pack else pack.id,
            "autograder", "--run", "prairielearn"]


def timeout_for(train_steps: int) -> int:
    """Seconds for one job: BASE_TIMEOUT, and more for a longer run (the submission's run and
    the reference's replay of as many steps, at a slow grader's pace), up to MAX_TIMEOUT."""
    extra = max(0, train_steps - TRAIN_STEPS) // 10
    return min(MAX_TIMEOUT, BASE_TIMEOUT + extra)


def info_json(pack: Pack, image: str, command: list[str], timeout: int,
              question_uuid: str) -> dict:
    return {
        "uuid": question_uuid,
        "title": f"Backpropagation by hand: {pack.title}",
        "topic": "Backpropagation",
        "tags": ["backprop-tutor"],
        "type": "v3",
        "singleVariant": True,
        "gradingMethod": "External",
        "externalGradingOptions": {
            "enabled": True,
            "image": image,
            "entrypoint": command,
            "timeout": timeout,
        },
    }


def dockerfile(image: str, wheel_name: str, folder_pack: bool) -> str:
    pack = f"COPY {PACK_FOLDER} {PACK_HOME}\n" if folder_pack else ""
    text = (HERE / "Dockerfile.template").read_text(encoding="utf-8")
    for key, value in (("IMAGE", image), ("TORCH_INDEX", TORCH_INDEX), ("TORCH", TORCH_VERSION),
                       ("WHEEL", wheel_name), ("PACK", pack)):
        text = text.replace(f"@{key}@", value)
    return text


def _kept_uuid(info: Path) -> str:
    """The question's uuid when the folder already holds one: PrairieLearn knows a question by
    it, so writing the files again keeps its submissions and statistics together."""
    try:
        kept = json.loads(info.read_text(encoding="utf-8")).get("uuid")
        return str(uuid.UUID(str(kept)))
    except (OSError, ValueError, AttributeError):
        return str(uuid.uuid4())


def write_recipe(out: Path, pack: Pack, wheel: Path, rules: GradingRules,
                 pack_files: list[tuple[str, Path]], image: str = IMAGE) -> list[str]:
    """Write the image's folder and the question's under `out`; the paths written, relative
    to `out`. `pack_files` are a folder pack's files (none for an installed pack)."""
    image_dir, question = out / "image", out / "questions" / QUESTION
    written: dict[Path, str | Path] = {
        image_dir / "Dockerfile": dockerfile(image, wheel.name, bool(pack_files)),
        image_dir / wheel.name: wheel,
        question / "info.json": json.dumps(
            info_json(pack, image, entrypoint(pack, bool(pack_files)),
                      timeout_for(rules.train_steps), _kept_uuid(question / "info.json")),
            indent=2) + "\n",
        question / "question.html": (HERE / "question.html").read_text(encoding="utf-8"),
        question / "tests" / CONFIG_NAME: rules_json(rules, pack),
        **{image_dir / name: path for name, path in pack_files},
    }
    for path, content in written.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, path)
        else:
            path.write_text(content, encoding="utf-8")
    return [p.relative_to(out).as_posix() for p in written]
