"""instruction: the task's instruction reworded with a fixed paraphrase bank; a level's templates add the level's
number of words around the original command, which keeps its verb and its objects (checked for every episode:
:func:`keeps_task`). The image and the world are unchanged; only the words a policy reads differ."""
from __future__ import annotations

import re
from dataclasses import replace

from embeval.errors import ConfigError, NotApplicableError
from embeval.sim.perturb.axis import Axis, Quantity

WORDS = Quantity("words added", "words", ((1, 2), (3, 5), (6, 9), (10, 14), (15, 22)))

#: level -> templates; ``{i}`` is the original instruction (lower case, no final full stop)
BANK: dict[int, tuple[str, ...]] = {
    1: ("please {i}", "{i}, please", "now {i}", "robot, {i}", "{i} now", "quickly {i}"),
    2: ("could you please {i}?", "I want you to {i}", "your task is to {i}", "{i} when you are ready",
        "go ahead and {i}", "{i} for me, please"),
    3: ("I would like you to carefully {i}", "the next thing to do is to {i}", "when you are ready, please {i} for me",
        "{i}, and leave the other objects alone", "take your time and {i} without rushing"),
    4: ("look at the table in front of you and {i} without hurrying",
        "there is a job for you on the table: please {i} and then stop",
        "for this episode your only goal is to {i}, nothing else",
        "{i}; do it smoothly and stop once you are done with it"),
    5: ("hello robot, I have a small job for you on the table today: please {i} and stop when it is done",
        "look carefully at everything on the table before you start, then {i} and hold still once you have finished",
        "this is an important step of a longer task, so please {i} carefully and do not touch anything else"),
}


def words(text: str) -> list[str]:
    """Lower-case words of ``text`` (letters, digits, apostrophes)."""
    return re.findall(r"[a-z0-9']+", text.lower())


def added_words(template: str) -> int:
    return len(words(template.replace("{i}", " ")))


def _check_bank() -> None:
    for level, templates in BANK.items():
        lo, hi = WORDS.range(level)
        for t in templates:
            if t.count("{i}") != 1 or not lo <= added_words(t) <= hi:
                raise ConfigError(f"instruction bank level {level}: {t!r} must hold {{i}} once and add {lo:g}-{hi:g} "
                                  f"words (adds {added_words(t)})")


_check_bank()


def _contains(haystack: list[str], needle: list[str]) -> bool:
    n = len(needle)
    return n == 0 or any(haystack[k:k + n] == needle for k in range(len(haystack) - n + 1))


def keeps_task(paraphrase: str, original: str, task=None, scene=None) -> bool:
    """Whether ``paraphrase`` keeps the task's verb (the original's first word) and its objects (the target's and
    the reference's descriptions, e.g. "red cube", "yellow plate"; without a scene, the original's other words)."""
    got = words(paraphrase)
    want = words(original)
    if not want or not _contains(got, want[:1]):
        return False
    phrases = [want[1:]]
    if task is not None and scene is not None:
        names = {o.name: o for o in scene.objects}
        phrases = [words(names[n].describe()) for n in (task.target, task.reference) if n in names]
    return all(_contains(got, p) for p in phrases)


def paraphrase(original: str, level: int, u: float) -> str:
    """The bank's template at fraction ``u`` (0..1) of level ``level``'s list, filled with ``original``."""
    templates = BANK[level]
    text = templates[min(int(u * len(templates)), len(templates) - 1)].replace("{i}", original.strip().rstrip("."))
    return text[0].upper() + text[1:]


def sample(rng, level, scene, task):
    u = rng.uniform()
    if task is None:
        raise NotApplicableError("instruction: this scene has no task, so there is no instruction to reword")
    new = paraphrase(task.instruction, level, u)
    if not keeps_task(new, task.instruction, task, scene):
        raise NotApplicableError(f"instruction:{level}: {new!r} drops the verb or an object of {task.instruction!r}")
    return {"instruction": new, "words_added": len(words(new)) - len(words(task.instruction))}


def sample_text(rng, level: int, original: str) -> dict:
    """The draw for a backend that has an instruction but no embeval task (LIBERO's language, ManiSkill's
    instruction): ``original`` reworded, its verb and its other words kept (checked)."""
    if not original or not words(original):
        raise NotApplicableError("instruction: this episode has no instruction to reword")
    new = paraphrase(original, level, rng.uniform())
    if not keeps_task(new, original):
        raise NotApplicableError(f"instruction:{level}: {new!r} drops the verb or an object of {original!r}")
    return {"instruction": new, "words_added": len(words(new)) - len(words(original))}


def apply(scene, task, params):
    return scene, replace(task, instruction=params["instruction"])


AXIS = Axis("instruction", (WORDS,), sample, scene=apply, changes="instruction",
            description="instruction reworded from a fixed paraphrase bank (verb and objects kept, checked)",
            direction="words added to the instruction",
            note=lambda p: p["instruction"])
