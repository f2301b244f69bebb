"""The README and the Makefile a handout gives its students, in the handout's language.

A self-study handout (``make handout``) holds every language's notebooks (``course/``, ``course/zh_CN/``): its
``make lab`` opens the one ``COURSE_LANG`` names, by default the handout's language, or, for an English handout,
the student's locale's (as the repository's ``make lab`` does). A class's handout (``make handout LAB=...``) holds its
class's language only, at ``course/<lab>/`` (a class is taught in one language; grading accepts every language):
its ``make lab`` opens ``course/``. Its README speaks the handout's language.
"""

from __future__ import annotations

from typing import Optional

from autograder.course import languages

# The repository's Makefile chooses the language the same way (its `make lab`); a test compares the two commands.
LOCALE_LANGUAGE = "$(if $(filter zh%,$(or $(LC_ALL),$(LC_MESSAGES),$(LANG))),zh_CN,en)"

_CHOICE = """\
# COURSE_LANG=en opens the labs in English (course/), COURSE_LANG=zh_CN in Simplified Chinese (course/zh_CN/); by
# default {default_said}. (Not LANG: that is the locale, which make passes on to every command.)
COURSE_LANG ?=
LAB_LANG := $(or $(COURSE_LANG),{default})
LAB_SUBDIR := $(if $(filter zh_CN,$(LAB_LANG)),/zh_CN)
"""
_ONE_LANGUAGE = """\
# This class's labs are in {name}, in course/ (a class is taught in one language).
LAB_LANG := {language}
LAB_SUBDIR :=
"""

MAKEFILE = """\
# paged-kv-course (student handout): `make lab` installs what the course needs and opens it.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
KERNEL := $(VENV)/.kernel-stamp
# make lab PORT=8899 LAB_ARGS="--no-browser --ip=0.0.0.0": any JupyterLab option goes in LAB_ARGS.
PORT ?=
LAB_ARGS ?=
{languages}# On Linux without an NVIDIA driver (no nvidia-smi), pip takes the CPU build of the lock's torch from PyTorch's own
# index (torch==X matches X+cpu, which it prefers): PyPI's Linux build brings CUDA's libraries, several GB the labs
# never use there. TORCH_INDEX= keeps PyPI's build.
TORCH_INDEX ?= $(if $(filter Linux,$(shell uname -s)),$(if $(shell command -v nvidia-smi),,https://download.pytorch.org/whl/cpu))
PIP_INDEX := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))

.PHONY: lab env
lab: env
\t$(if $(filter-out en zh_CN,$(LAB_LANG)),$(error COURSE_LANG must be en or zh_CN, not '$(LAB_LANG)'))
\tJUPYTER_CONFIG_PATH="$(CURDIR)/student-lab$(if $(JUPYTER_CONFIG_PATH),:$(JUPYTER_CONFIG_PATH))" \\
\t$(VENV)/bin/jupyter lab --notebook-dir=course$(LAB_SUBDIR) $(if $(PORT),--port=$(PORT)) $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

env: $(STAMP) $(KERNEL)

$(STAMP): requirements-lock.txt pyproject.toml
\t@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10+ is needed, found " + sys.version.split()[0])'
\ttest -x $(PY) || $(PYTHON) -m venv $(VENV)
\t$(PY) -m pip install --quiet --upgrade pip
\tif $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then \\
\t  $(PY) -m pip install --quiet $(PIP_INDEX) -r requirements-lock.txt; \\
\telse \\
\t  $(PY) -m pip install --quiet $(PIP_INDEX) -e ".[course]"; \\
\tfi
\t$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
\ttouch $(STAMP)

# The notebooks' kernel (paged_kv/lab/notebook_kernel.py: reports what the notebooks store, so they open saved).
$(KERNEL): $(STAMP) paged_kv/lab/notebook_kernel.py
\t$(PY) -m paged_kv.lab.notebook_kernel install >/dev/null
\ttouch $(KERNEL)
"""


def makefile(language: str, lab: Optional[str]) -> str:
    """The handout's Makefile: its ``make lab`` opens ``language``'s labs (see the module doc)."""
    languages.check_language(language)
    if lab is not None:
        choice = _ONE_LANGUAGE.format(name=languages.NAMES[language], language=language)
    elif language == languages.SOURCE:
        choice = _CHOICE.format(default=LOCALE_LANGUAGE, default_said="the language of your locale (zh...: Chinese)")
    else:
        choice = _CHOICE.format(default=language, default_said=f"{languages.NAMES[language]}, this handout's")
    return MAKEFILE.format(languages=choice)


README = {
    "en": """\
# paged-kv-course: the labs

How LLM inference engines manage the KV cache with paged attention, one lab at a time.

- On your machine (Python 3.10+): `make lab` installs the course into `.venv/` (on Linux without an
  NVIDIA GPU, PyTorch's CPU build: far smaller than PyPI's) and opens JupyterLab on `{folder}`. Work
  through the labs in order, starting with `00-start-here`. On a remote machine, run
  `make lab PORT=8899 LAB_ARGS=--no-browser` there and `ssh -L 8899:localhost:8899 that-machine`
  here, then open the link it prints (any JupyterLab option goes in `LAB_ARGS`).
- In Google Colab: upload a notebook from `{folder}`; its first cell installs the course package (a class's
  handout: see below).

Each lab has an answer cell to fill in and a cell of visible tests to run after it; more tests run
when your notebook is graded. Submit the notebook file itself (`.ipynb`), keeping its name and the
names of the functions and classes the lab asks for.
""",
    "zh_CN": """\
# paged-kv-course：实验

一个实验讲一个机制：LLM 推理引擎如何用分页注意力（PagedAttention）管理 KV 缓存。

- 在自己的机器上（Python 3.10+）：`make lab` 把课程装进 `.venv/`（在没有 NVIDIA GPU 的 Linux 上装 PyTorch
  的 CPU 版，比 PyPI 上的版本小得多），然后用 JupyterLab 打开 `{folder}`。按顺序做实验，从 `00-start-here`
  开始。在远程机器上：在那台机器上运行 `make lab PORT=8899 LAB_ARGS=--no-browser`，在本机运行
  `ssh -L 8899:localhost:8899 <远程机器>`，再打开它打印出来的链接（JupyterLab 的其他选项都写进 `LAB_ARGS`）。
- 在 Google Colab 中：上传 `{folder}` 里的一个笔记本，它的第一个代码单元会安装课程的 Python 包（班级讲义见下文）。

每个实验都有一个等你填写的答案单元，后面跟着一个可见测试单元，写完答案就运行它；评分时还会运行更多测试。
提交笔记本文件本身（`.ipynb`），不要改它的文件名，也不要改实验要求你实现的函数名和类名。
""",
}

OTHER_LANGUAGE = {
    "en": "\nThe labs are in Simplified Chinese too (课程也有简体中文版): `make lab COURSE_LANG=zh_CN` opens `course/zh_CN/`.\n",
    "zh_CN": "\n英文原版在 `course/` 里：`make lab COURSE_LANG=en` 打开它。\n",
}

EDITION_NOTE = {
    "en": """
This handout is for lab {lab}: it holds the labs up to that one, and its copy of the course package leaves
out the code that answers lab {lab} and every later lab (calling it says so). Your own code answers them.

In Google Colab, upload the lab's notebook and `colab/paged-kv-class-edition.zip` (the Files panel, the
folder icon on the left): the notebook's first cell installs that copy of the package (not the public one).
In a ModelScope (魔搭) notebook instance, upload both to the same folder (the file browser's upload button; it
starts at `/mnt/workspace`): the notebook's first cell installs that copy there too.
""",
    "zh_CN": """
这份讲义是为实验 {lab} 准备的：它包含到这个实验为止的所有实验；其中的课程包去掉了实验 {lab} 及之后各实验的
答案代码（调用到这些代码时会提示你）。这些实验要靠你自己的代码完成。

在 Google Colab 中：把这个实验的笔记本和 `colab/paged-kv-class-edition.zip` 都上传上去（左侧的“文件”面板，
文件夹图标）。笔记本的第一个代码单元会安装这份课程包（而不是公开发布的那一份）。
在魔搭（ModelScope）的 Notebook 实例中：把这两个文件上传到同一个文件夹（文件浏览器的上传按钮，它从 `/mnt/workspace`
开始）。笔记本的第一个代码单元同样会安装这份课程包。
""",
}


def readme(language: str, lab: Optional[str]) -> str:
    """The handout's README.md, in ``language`` (see the module doc)."""
    languages.check_language(language)
    folder = "course/" if lab is not None or language == languages.SOURCE else f"course/{language}/"
    text = README[language].format(folder=folder)
    if lab is None:
        text += OTHER_LANGUAGE[language]
    else:
        text += EDITION_NOTE[language].format(lab=lab)
    return text
