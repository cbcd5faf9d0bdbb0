import pytest
import torch

from seq2seq.plots import attention_figure, band_panels_figure, figure_png

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
