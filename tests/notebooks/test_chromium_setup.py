"""How the browser tests get Chromium: found, installed by apt as root, or skipped with instructions."""

import os

import pytest

import chromium


def test_a_missing_chromium_without_root_skips_with_install_instructions(monkeypatch, tmp_path):
    monkeypatch.delenv("PAGED_KV_CHROMIUM", raising=False)
    monkeypatch.setattr(chromium.shutil, "which", lambda name: None)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    installs = []
    monkeypatch.setattr(chromium, "install_chromium", installs.append)
    path, reason = chromium.chromium_or_reason(tmp_path / "apt.log")
    assert path is None and installs == []
    assert "apt-get install chromium" in reason and "PAGED_KV_CHROMIUM" in reason


def test_a_missing_chromium_as_root_is_installed_with_apt(monkeypatch, tmp_path):
    monkeypatch.delenv("PAGED_KV_CHROMIUM", raising=False)
    installed = []
    monkeypatch.setattr(
        chromium.shutil,
        "which",
        lambda name: (
            "/usr/bin/chromium"
            if installed and name == "chromium"
            else ("/usr/bin/apt-get" if name == "apt-get" else None)
        ),
    )
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(chromium, "install_chromium", installed.append)
    assert chromium.chromium_or_reason(tmp_path / "apt.log") == ("/usr/bin/chromium", None)
    assert installed == [tmp_path / "apt.log"]


def test_an_override_must_be_an_executable(monkeypatch, tmp_path):
    monkeypatch.setenv("PAGED_KV_CHROMIUM", str(tmp_path / "no-such-browser"))
    with pytest.raises(FileNotFoundError, match="PAGED_KV_CHROMIUM"):
        chromium.find_chromium()
    browser = tmp_path / "chrome"
    browser.write_text("#!/bin/sh\n")
    browser.chmod(0o755)
    monkeypatch.setenv("PAGED_KV_CHROMIUM", str(browser))
    assert chromium.find_chromium() == str(browser)
