"""The single-user image's file tree, staged in a folder from deploy/Dockerfile's own instructions (no Docker).

``stage_image(root)`` reads deploy/Dockerfile and carries out its instructions inside ``root``, which stands
for the image's ``/``: ``ARG`` values are substituted (and given to ``RUN`` as environment variables, as
Docker does), ``COPY`` copies from the repository, ``ENV`` is recorded, and each command of a ``RUN`` (the
Dockerfile's ``&&`` between them) runs as written, with the image's folders that the build writes
(``STAGED``) moved into ``root``. A path the build only names stays as written: the instructor's course
folder under ``/home/jovyan``, which the instructor's settings read when their server runs. A command that
cannot run here is stood for or left out, as ``_run_step`` says for each kind; a command of no known kind
stops the staging, so that a changed Dockerfile shows up here rather than being skipped.

Stood for:

- the base image's Python (``FROM python:3.11...``, prefix ``/usr/local``): a virtual environment of this
  Python at ``root/usr/local``, so that what the build installs into the image's Python lands in the tree;
- ``pip install -r requirements-lock.txt``: the course venv, which holds the lock, is put on that
  environment's path (a ``.pth`` file) instead of a second install;
- ``pip install --no-deps SRC``: the packages ``SRC/pyproject.toml`` names are copied into its site-packages;
- ``useradd``: the account's line in ``root/etc/passwd`` and its home folder, no account on this machine.

Left out: ``apt-get`` (Debian's git and make) and the removal of apt's lists.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
PREFIX = "/usr/local"  # the python image's prefix: its python, what pip installs, the course kernel
# The image's folders that the build writes, moved into the staged tree; every other path stays as written.
STAGED = ("/srv/paged-kv", "/opt/paged-kv", "/etc/passwd", PREFIX)
_STAGED = re.compile(r"(?<![\w./-])(" + "|".join(map(re.escape, STAGED)) + r")(?=[/\s;:'\"]|$)")
_ARG = re.compile(r"\$\{(\w+)\}")
_COPY_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")  # not in a clean clone, which the build copies


@dataclass
class ImageTree:
    """The staged tree: ``root`` stands for the image's ``/``."""

    root: Path
    args: Dict[str, str] = field(default_factory=dict)  # the Dockerfile's ARG values
    env: Dict[str, str] = field(default_factory=dict)  # its ENV, as written (image paths)

    def staged(self, text: str) -> str:
        """``text`` with every image path under ``STAGED`` moved into this tree."""
        return _STAGED.sub(lambda match: str(self.root) + match.group(1), text)

    def local(self, image_path: str) -> Path:
        """Where the image's ``image_path`` (under one of ``STAGED``) lies in this tree."""
        if not _STAGED.match(image_path):
            raise ValueError(f"{image_path} is not under the staged folders {STAGED}")
        return Path(self.staged(image_path))

    def in_image(self, path) -> str:
        """The image's path of ``path``, a path in this tree."""
        return "/" + str(Path(path).relative_to(self.root))

    @property
    def python(self) -> Path:
        """The image's Python (``/usr/local/bin/python``) in this tree."""
        return self.local(PREFIX) / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return self.local(PREFIX) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"

    def build_env(self) -> Dict[str, str]:
        """A RUN command's environment: the ARGs, a home inside the tree, no PYTHONPATH (the image sets none)."""
        return {"PATH": os.environ["PATH"], "HOME": str(self.root / "root"), "LANG": "C.UTF-8", **self.args}

    def _inside(self, path: str) -> bool:
        return Path(path).resolve().is_relative_to(self.root.resolve())


def instructions(text: str) -> List[Tuple[str, str]]:
    """A Dockerfile's instructions, ``(KEYWORD, arguments)``: comment lines dropped, continued lines joined."""
    kept = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    joined = re.sub(r"\\\n", " ", kept)
    return [tuple(line.strip().split(None, 1)) for line in joined.splitlines() if line.strip()]


def stage_image(root: Path, dockerfile: Path = DOCKERFILE) -> ImageTree:
    """Stage the image deploy/Dockerfile builds in ``root`` (see the module's docstring); the staged tree."""
    tree = ImageTree(Path(root).resolve())
    tree.root.mkdir(parents=True, exist_ok=True)
    cwd = tree.root
    for keyword, arguments in instructions(dockerfile.read_text()):
        # ${NAME} of an ARG, as Docker (in a RUN: the shell, which has the ARGs in its environment); ${uid} of
        # the passwd loop is the loop's own
        arguments = _ARG.sub(lambda match: tree.args.get(match.group(1), match.group(0)), arguments)
        if keyword == "FROM":
            _base_python(tree, arguments)
        elif keyword in ("ARG", "ENV"):
            for word in shlex.split(arguments):
                name, _, value = word.partition("=")
                (tree.args if keyword == "ARG" else tree.env)[name] = value
        elif keyword == "COPY":
            *sources, destination = shlex.split(arguments)
            _copy(tree, sources, destination)
        elif keyword == "RUN":
            for step in arguments.split("&&"):
                cwd = _run_step(tree, step.strip(), cwd)
        elif keyword not in ("USER", "WORKDIR", "CMD"):  # the server's user and command are the pod's
            raise ValueError(f"the staging does not know the Dockerfile instruction {keyword} {arguments}")
    return tree


def _base_python(tree: ImageTree, image: str) -> None:
    """Stands for the python image: a virtual environment of this Python at ``/usr/local``, and an empty
    ``/etc/passwd`` (the base image's system accounts are not staged)."""
    wanted = f"python:{sys.version_info.major}.{sys.version_info.minor}"
    if not re.fullmatch(re.escape(wanted) + r"([-.][\w.-]*)?", image):
        raise ValueError(f"the image is built FROM {image}; this staging stands for it with {wanted} only")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tree.local(PREFIX))], check=True)
    tree.local("/etc/passwd").parent.mkdir(exist_ok=True)
    tree.local("/etc/passwd").touch()


def _copy(tree: ImageTree, sources: List[str], destination: str) -> None:
    target = tree.local(destination)
    into = destination.endswith("/") or len(sources) > 1
    for source in sources:
        path, to = ROOT / source, target / Path(source).name if into else target
        to.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, to, ignore=_COPY_IGNORE)
        else:
            shutil.copy2(path, to)


def _run_step(tree: ImageTree, step: str, cwd: Path) -> Path:
    """Carry out one command of a RUN; the working folder of the next."""
    words = shlex.split(step)
    head = words[0]
    if head == "cd":
        return tree.local(words[1])
    if head == "apt-get" or step == "rm -rf /var/lib/apt/lists/*":
        return cwd  # left out: Debian's git and make, which no check here needs
    if head == "useradd":  # stood for: the account's passwd line and home, not an account on this machine
        option = {words[i]: words[i + 1] for i in range(1, len(words) - 1) if words[i] in ("--uid", "--gid", "--shell")}
        name = words[-1]
        with open(tree.local("/etc/passwd"), "a") as passwd:
            passwd.write(f"{name}:x:{option['--uid']}:{option['--gid']}::/home/{name}:{option['--shell']}\n")
        (tree.root / "home" / name).mkdir(parents=True, exist_ok=True)
        return cwd
    if head == "pip" and "-r" in words:  # stood for: the course venv holds the lock
        course_site = sysconfig.get_paths()["purelib"]
        (tree.site_packages / "paged-kv-course-lock.pth").write_text(f"import site; site.addsitedir({course_site!r})\n")
        return cwd
    if head == "pip" and "--no-deps" in words:  # stood for: pip's copy of the packages into site-packages
        source = tree.local(words[-1])
        names = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
        for top in sorted({name.split(".")[0] for name in names}):
            shutil.copytree(source / top, tree.site_packages / top, ignore=_COPY_IGNORE)
        return cwd
    if head == "python":
        done = subprocess.run(
            [str(tree.python), *(tree.staged(word) for word in words[1:])],
            cwd=cwd,
            env=tree.build_env(),
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"`{step}` failed in the staged image:\n{done.stdout}{done.stderr}")
        return cwd
    if head in ("mkdir", "rm", "for"):
        command = tree.staged(step)
        written = shlex.split(command)[1:] if head != "for" else re.findall(r">>?\s*(\S+)", command)
        outside = [path for path in written if path.startswith("/") and not tree._inside(path)]
        if outside:
            raise ValueError(f"`{step}` would write outside the staged tree: {outside}")
        subprocess.run(["sh", "-c", command], cwd=cwd, env=tree.build_env(), check=True)
        return cwd
    raise ValueError(f"the staging does not know how to run the Dockerfile's `{step}`")
