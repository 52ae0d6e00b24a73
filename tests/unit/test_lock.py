"""The dependency set: every package pinned with hashes in requirements/*.lock, the pins
inside pyproject.toml's ranges, and the compromised litellm 1.107.0 selectable by
neither."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCKS = {"run": ROOT / "requirements" / "run.lock", "test": ROOT / "requirements" / "test.lock"}
COMPROMISED = {"litellm": {Version("1.107.0")}}
# Known-vulnerable releases the floors exclude.
FLOORS = {"aiohttp": Version("3.12.14"), "h11": Version("0.16")}


def _pins(lock: Path) -> dict[str, tuple[Version, int]]:
    """Each package's pinned version and how many hashes it carries."""
    pins: dict[str, tuple[Version, int]] = {}
    name = None
    for line in lock.read_text().splitlines():
        found = re.match(r"^([A-Za-z0-9_.-]+)==([^ ;\\]+)", line)
        if found:
            name = canonicalize_name(found.group(1))
            pins[name] = (Version(found.group(2)), 0)
        elif name and line.strip().startswith("--hash=sha256:"):
            version, hashes = pins[name]
            pins[name] = (version, hashes + 1)
    return pins


def _requirements(extra: str | None) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = list(project["dependencies"])
    if extra:
        listed += project["optional-dependencies"][extra]
    return [Requirement(r) for r in listed]


@pytest.mark.parametrize(("name", "extra"), [("run", None), ("test", "test")])
def test_every_dependency_is_pinned_with_hashes_inside_pyprojects_range(
    name: str, extra: str | None
) -> None:
    pins = _pins(LOCKS[name])
    assert pins, f"{LOCKS[name]} pins nothing"
    assert all(hashes > 0 for _version, hashes in pins.values()), "a pin without a hash"
    for requirement in _requirements(extra):
        key = canonicalize_name(requirement.name)
        assert key in pins, f"{requirement.name} is not in {LOCKS[name].name}: run make lock"
        version = pins[key][0]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{LOCKS[name].name} pins {requirement.name}=={version}, outside pyproject's "
            f"{requirement.specifier}: run make lock"
        )


def test_neither_the_lock_nor_pyproject_can_select_a_compromised_or_vulnerable_release() -> None:
    requirements = {canonicalize_name(r.name): r for r in _requirements("test")}
    for package, bad in COMPROMISED.items():
        for version in bad:
            assert not requirements[package].specifier.contains(version, prereleases=True)
    for package, floor in FLOORS.items():
        older = Version(f"{floor.major}.{floor.minor}.{max(floor.micro - 1, 0)}")
        if floor.micro == 0:
            older = Version(f"{floor.major}.{max(floor.minor - 1, 0)}.99")
        assert not requirements[package].specifier.contains(older, prereleases=True), package
    for lock in LOCKS.values():
        pins = _pins(lock)
        for package, bad in COMPROMISED.items():
            assert pins[package][0] not in bad, f"{lock.name} pins a compromised {package}"
        for package, floor in FLOORS.items():
            assert pins[package][0] >= floor, f"{lock.name} pins a vulnerable {package}"


def test_the_locks_are_installed_by_the_locked_pip() -> None:
    """Python 3.11's own pip (23.2) resolves an extra a locked package asks for
    (litellm's httpx[http2]) to the newest release, past the pin, and then refuses the
    lock in --require-hashes mode: every venv is upgraded from requirements/pip.lock first."""
    wanted = Requirement(
        next(
            line
            for line in (ROOT / "requirements" / "pip.in").read_text().splitlines()
            if line.strip() and not line.startswith("#")
        )
    )
    pins = _pins(ROOT / "requirements" / "pip.lock")
    assert set(pins) == {"pip"}, pins
    version, hashes = pins["pip"]
    assert hashes > 0
    assert wanted.specifier.contains(version)
    assert version >= Version("25.3")
    makefile = (ROOT / "Makefile").read_text()
    stamp = re.search(r"^\$\(VENV\)/\.pip: requirements/pip\.lock.*\n\t(.+)$", makefile, re.M)
    assert stamp, "no $(VENV)/.pip rule in the Makefile"
    assert "--require-hashes -r requirements/pip.lock" in stamp.group(1)
    for target in (".installed-run", ".installed-test"):
        rule = re.search(rf"^\$\(VENV\)/{re.escape(target)}: (.+)$", makefile, re.M)
        assert rule, f"no {target} rule in the Makefile"
        assert "$(VENV)/.pip" in rule.group(1), f"{target} does not wait for the pip"
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert dockerfile.index("-r pip.lock") < dockerfile.index("-r run.lock")
