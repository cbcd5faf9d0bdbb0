import pytest
import torch

from seq2seq.plots import (
    attention_figure,
    band_panels_figure,
    curves_figure,
    figure_png,
    line_grid_figure,
)

PNG = b"\x89PNG\r\n\x1a\n"


def test_heatmap_png_for_single_and_multi_head_weights():
    single = torch.softmax(torch.randn(3, 4), -1)
    assert figure_png(attention_figure(single, list("abcd"), list("xyz"))).startswith(PNG)
    heads = torch.softmax(torch.randn(3, 2, 4), -1)
    figure = attention_figure(heads, list("abcd"), list("xyz"))
    assert figure.axes[0].get_title() == "mean over 2 heads"
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == list("abcd")
    assert figure_png(figure).startswith(PNG)


def test_labels_must_match_the_weights():
    with pytest.raises(ValueError, match="do not match 3 target x 5 source"):
        attention_figure(torch.zeros(3, 4), list("abcde"), list("xyz"))


def test_a_name_keeps_its_colour_in_panels_that_lack_other_names():
    band = ([1, 2], [0.5, 0.4], [0.1, 0.1])
    panels = {"some": {"cosine": band}, "all": {"dot": band, "cosine": band}}
    figure = band_panels_figure(panels, "update")
    colours = [{line.get_label(): line.get_color() for line in axes.lines} for axes in figure.axes]
    assert colours[1]["dot"] != colours[1]["cosine"] == colours[0]["cosine"]
    assert [axes.get_title() for axes in figure.axes] == ["some", "all"]
    # one legend for all panels, with the names the first panel lacks
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["cosine", "dot"]
    assert figure_png(figure).startswith(PNG)


def test_a_grid_has_a_row_per_title_a_column_per_panel_and_its_marks():
    line = ([250, 500], [0.6, 0.2])
    rows = {
        "dot": {"entropy": {"seed 1": line, "seed 2": line}, "sink": {"seed 1": line}},
        "cosine": {"sink": {"seed 2": line}},  # lacks a column and a seed
    }
    figure = line_grid_figure(rows, "update", {"sink": 0.5})
    (dot_entropy, dot_sink), (cosine_entropy, cosine_sink) = figure.axes[:2], figure.axes[2:4]
    assert [dot_entropy.get_title(), dot_sink.get_title()] == ["entropy", "sink"]
    assert [dot_entropy.get_ylabel(), cosine_entropy.get_ylabel()] == ["dot", "cosine"]
    colours = {line.get_label(): line.get_color() for line in dot_entropy.lines}
    assert cosine_sink.lines[0].get_color() == colours["seed 2"] != colours["seed 1"]
    assert not cosine_entropy.lines
    marks = [line for line in dot_sink.lines + cosine_sink.lines if line.get_linestyle() == "--"]
    assert [line.get_ydata()[0] for line in marks] == [0.5, 0.5]
    assert [text.get_text() for text in figure.legends[0].get_texts()] == ["seed 1", "seed 2"]
    assert figure_png(figure).startswith(PNG)


def test_eleven_lines_are_drawn_in_eleven_styles():
    names = [f"type {i}" for i in range(11)]
    band = ([1, 2], [0.5, 0.4], [0.1, 0.1])
    figures = [
        curves_figure({name: band[:2] for name in names}, "step", "BLEU"),
        band_panels_figure({"entropy": dict.fromkeys(names, band)}, "update"),
        line_grid_figure({"dot": {"sink": dict.fromkeys(names, band[:2])}}, "update", {}),
    ]
    for figure in figures:
        styles = {(line.get_color(), line.get_linestyle()) for line in figure.axes[0].lines}
        assert len(styles) == len(names)
        figure_png(figure)
