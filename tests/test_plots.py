import pytest
import torch

from seq2seq.plots import attention_figure, figure_png

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
