"""The notebook's language: which one is current, how a text or an f-string's result is translated, and how the
feedback blocks read in Chinese (and exactly as before in English)."""

import threading

import pytest

from paged_kv.lab import i18n
from paged_kv.lab.feedback import CheckFailed, attempt, expect, expect_equal, expect_raises, practice, show_when_ready
from paged_kv.lab.i18n import Catalog, language, set_language, speaking, told, translate
from paged_kv.lab.message_layout import width, wrap


@pytest.fixture(autouse=True)
def english_by_default(monkeypatch):
    monkeypatch.delenv("PAGED_KV_LANG", raising=False)
    monkeypatch.setattr(i18n, "_chosen", None)


def test_the_language_is_speaking_then_set_language_then_the_environment(monkeypatch):
    assert language() == "en"
    monkeypatch.setenv("PAGED_KV_LANG", "zh_CN")
    assert language() == "zh_CN"
    monkeypatch.setenv("PAGED_KV_LANG", "klingon")  # not a language of the course: English
    assert language() == "en"
    set_language("zh_CN")
    assert language() == "zh_CN"
    with speaking("en"):
        assert language() == "en"
    assert language() == "zh_CN"


def test_speaking_holds_for_its_own_thread_only():
    seen = []
    with speaking("zh_CN"):
        thread = threading.Thread(target=lambda: seen.append(language()))
        thread.start()
        thread.join()
        assert language() == "zh_CN"
    assert seen == ["en"]


@pytest.mark.parametrize("bad", ["zh", "", None, "ZH_CN", 3])
def test_an_unknown_language_is_refused_and_changes_nothing(bad):
    with pytest.raises(ValueError, match="language must be one of en, zh_CN"):
        set_language(bad)
    with pytest.raises(ValueError, match="language must be one of"):
        with speaking(bad):
            pass
    assert language() == "en"


def test_a_template_matches_the_text_its_f_string_made():
    catalog = Catalog(
        {
            "seq_len={n}: blocks taken": "seq_len={n}：占用的块数",
            "expected {a}, got {b}": "期望 {a}，实际是 {b}",
            "{x!r} twice: {x!r}": "两次 {x!r}",
            "a {{literal}} brace": "字面 {{literal}} 括号",
        }
    )
    n = 6
    assert catalog.translate(f"seq_len={n}: blocks taken") == "seq_len=6：占用的块数"
    assert catalog.translate("expected list, got float") == "期望 list，实际是 float"
    assert catalog.translate("'a' twice: 'a'") == "两次 'a'"
    assert catalog.translate("'a' twice: 'b'") == "'a' twice: 'b'"  # a field repeated must match the same text
    assert catalog.translate("a {literal} brace") == "字面 {literal} 括号"
    assert catalog.translate("seq_len=6: blocks taken twice") == "seq_len=6: blocks taken twice"  # whole text only


def test_a_template_without_enough_literal_text_never_matches():
    catalog = Catalog({"{x}": "X", "a {x}": "A", "no {x}{y}": "没有"})
    assert len(catalog) == 0
    assert catalog.translate("anything") == "anything"


def test_the_template_with_the_most_literal_text_wins():
    catalog = Catalog({"expected {a}": "短", "expected {a}, got {b}": "期望 {a}，实际是 {b}"})
    assert catalog.translate("expected 1, got 2") == "期望 1，实际是 2"


def test_english_is_the_text_itself_and_an_unknown_text_stays_english():
    assert translate("wrong value") == "wrong value"
    with speaking("zh_CN"):
        assert translate("wrong value") == "值不对"
        assert translate("a text no catalog knows") == "a text no catalog knows"
        assert translate("") == ""


def test_a_message_is_recognised_by_its_template_in_the_language_it_was_made_in():
    template = "the trace is still running after {steps} steps: is a request stuck?"
    steps = 30
    english = f"the trace is still running after {steps} steps: is a request stuck?"
    with speaking("zh_CN"):
        chinese = translate(english)
        assert chinese != english and told(template, chinese) and told(template, "raised X: " + english)
        assert not told(template, "the trace finished after 30 steps")
    assert told(template, english) and not told(template, chinese)  # English knows no other language's form


def _block(func, *args, **kwargs):
    with pytest.raises(CheckFailed) as caught:
        func(*args, **kwargs)
    return caught.value


def test_a_failed_check_reads_exactly_as_before_in_english():
    failed = _block(expect_equal, "prompt_len=6, block_size=4: blocks taken", 1, 2, "ceil(6 / 4) = 2, not 6 // 4")
    assert str(failed) == (
        "[prompt_len=6, block_size=4: blocks taken] wrong value\n  expected: 2\n  got:      1\n"
        "  hint:     ceil(6 / 4) = 2, not 6 // 4"
    )
    assert (
        failed._render_traceback_()[0]
        == "\x1b[31m\x1b[1mCheck failed\x1b[0m [prompt_len=6, block_size=4: blocks taken] wrong value"
    )


def test_a_failed_check_of_a_code_cell_reads_in_chinese():
    with speaking("zh_CN"):
        failed = _block(expect_equal, "prompt_len=6, block_size=4: blocks taken", 1.0, 2, "ceil(6 / 4) = 2, not 6 // 4")
        rendered = failed._render_traceback_()
    assert failed.case == "prompt_len=6，block_size=4：占用的块数"
    assert failed.problem == "期望 int，实际是 float"
    assert failed.hint.startswith("用整数运算：用 // 而不是 /") and failed.hint.endswith(
        "；是 ceil(6 / 4) = 2，不是 6 // 4"
    )
    assert rendered[0].startswith("\x1b[31m\x1b[1m检查未通过\x1b[0m [prompt_len=6")
    assert rendered[1] == "  期望值：  2" and rendered[2] == "  实际值：  1.0"  # labels aligned by display width
    assert rendered[3].startswith("  提示：    用整数运算")


def test_the_feedback_functions_own_wording_is_chinese():
    with speaking("zh_CN"):
        assert _block(expect_equal, "c", [1], [1, 2]).problem == "期望长度 2，实际长度 1"
        assert _block(expect_equal, "c", [1, 3], [1, 2]).problem == "值不对（位置：result[1]）"
        assert _block(expect_raises, "c", ValueError, lambda: None).problem == "期望抛出 ValueError，但什么也没抛出"
        assert _block(attempt, "c", lambda: {}["k"]).problem == "抛出了 KeyError：'k'"
        assert _block(expect, False, "c", "wrong value").problem == "值不对"


def test_practice_and_show_when_ready_speak_chinese(capsys):
    def unwritten():
        raise NotImplementedError

    with speaking("zh_CN"):
        practice(unwritten, todo="BlockManager (parts 1 to 4)")
        show_when_ready(unwritten, "allocate_for_prefill")
        practice(lambda: None)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "先完成 BlockManager（第 1 到 4 部分），重新运行它的单元格，再运行这个单元格来做这道练习。"
    assert out[1] == "先完成 allocate_for_prefill，重新运行它的单元格，再运行这个单元格，看看你实现的效果。"
    assert out[2] == "<lambda>：通过"


def test_a_chinese_hint_wraps_between_characters_never_inside_an_identifier():
    hint = "  提示：    " + "把分出去的块从 self.free_blocks 中移除，" * 6
    with speaking("zh_CN"):
        lines = wrap(hint, 60).splitlines()
    assert len(lines) > 2 and all(width(line) <= 60 for line in lines)
    assert all(line.startswith(" " * 12) for line in lines[1:])
    assert "".join("".join(line.split()) for line in lines) == "".join(hint.split())  # only spaces change
    assert all("self.free_blocks" in line or "self." not in line for line in lines)
    assert not any(line.strip().startswith(("，", "。")) for line in lines)  # a closing sign never begins a line


def test_a_templates_fields_are_translated_where_the_catalog_knows_what_they_matched():
    catalog = Catalog(
        {
            "raised {name}: {error}": "抛出了 {name}：{error}",
            "request {rid} holds no blocks": "请求 {rid} 没有持有任何块",
            "{case}: seq_len": "{case}：seq_len",
            "pool full": "块池已满",
        }
    )
    assert (
        catalog.translate("raised ValueError: request 3 holds no blocks") == "抛出了 ValueError：请求 3 没有持有任何块"
    )
    assert catalog.translate("pool full: seq_len") == "块池已满：seq_len"
    # a field the catalog does not know stays as it matched, never an error
    assert catalog.translate("raised KeyError: 'k'") == "抛出了 KeyError：'k'"


def test_a_mechanisms_message_shows_in_chinese_inside_a_teaching_aids_frame_and_unchanged_in_english():
    from paged_kv import KVCacheManager, Request

    manager = KVCacheManager(num_blocks=2, block_size=4, head_dim=1)
    never_prefilled = Request(0, 3)
    english = _block(attempt, "decode", manager.allocate_for_decode, never_prefilled).problem
    assert english == "raised ValueError: request 0 holds no blocks; call allocate_for_prefill first"
    with speaking("zh_CN"):
        chinese = _block(attempt, "decode", manager.allocate_for_decode, never_prefilled).problem
    assert chinese == "抛出了 ValueError：请求 0 没有持有任何块；先调用 allocate_for_prefill"
    with speaking("zh_CN"):  # a message no catalog has (a student's own) stays as it is inside the frame
        mine = _block(attempt, "c", lambda: (_ for _ in ()).throw(ValueError("my own words"))).problem
    assert mine == "抛出了 ValueError：my own words"


def test_say_prints_a_code_cells_text_in_the_notebooks_language(capsys):
    from paged_kv.lab.feedback import say

    say("Visible tests passed.")
    with speaking("zh_CN"):
        say("Visible tests passed.")
        say("a text no catalog knows")
    assert capsys.readouterr().out.splitlines() == [
        "Visible tests passed.",
        "可见测试通过。",
        "a text no catalog knows",
    ]
    with pytest.raises(TypeError, match="say\\(\\) prints a text"):
        say(3)
