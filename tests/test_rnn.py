"""What is particular to the RNN; the shared model contract is in test_models.py."""

from seq2seq.config import ModelConfig
from seq2seq.models import build_model


def tiny(**kw):
    cfg = ModelConfig(embed_dim=16, hidden_dim=16, dropout=0.0, **kw)
    return build_model(cfg, 30, 30, pad_id=0)


def test_tied_embeddings_share_one_tensor():
    model = tiny(tied_embeddings=True)
    assert model.decoder.output.weight is model.decoder.embed.weight


def test_shared_embeddings_give_source_and_target_one_tensor():
    model = tiny(shared_embeddings=True)
    assert model.encoder.embed.weight is model.decoder.embed.weight
    assert tiny().encoder.embed.weight is not tiny().decoder.embed.weight
