"""The run configuration: its schema (`schema.py`, with the attention sections and their
registry of types in `attention.py`, the data and tokenizer sections in `data.py`, the
decoding section in `decode.py`, the training section in `training.py`) and how files
become one (`loading.py`).

A YAML file is read with `yaml.safe_load` (following `extends`), dotted `--set key=value`
overrides are applied, and the result is validated by the schema's pydantic models.
"""

from seq2seq.config.attention import (
    ATTENTION_TYPES,
    NORMALIZERS,
    AttentionConfig,
    AttentionType,
    HardAttentionConfig,
    SelfAttentionConfig,
)
from seq2seq.config.corpora import (
    CorpusSpec,
    DatasetCorpus,
    PathCorpus,
    corpus_name,
    corpus_path,
    describe_corpus,
    pair_name,
)
from seq2seq.config.data import DataConfig
from seq2seq.config.decode import GREEDY_SEARCH, DecodeConfig, Stopping
from seq2seq.config.languages import SourceTags, target_tag
from seq2seq.config.loading import (
    apply_override,
    config_from_dict,
    describe_validation_error,
    load_config,
    read_yaml,
)
from seq2seq.config.model import POSITION_TYPES, ModelConfig, PositionType
from seq2seq.config.schema import Config, config_differences, flatten
from seq2seq.config.tokenizer import SubwordSamplingConfig, TokenizerConfig
from seq2seq.config.training import (
    VALIDATION_AER,
    VALIDATION_LOSS,
    DistillConfig,
    LoraConfig,
    OptimizerConfig,
    ScheduleConfig,
    TrainConfig,
    metric_of,
    parse_duration,
    validation_metrics,
)

__all__ = [
    "ATTENTION_TYPES",
    "NORMALIZERS",
    "POSITION_TYPES",
    "VALIDATION_AER",
    "VALIDATION_LOSS",
    "AttentionConfig",
    "AttentionType",
    "Config",
    "CorpusSpec",
    "DataConfig",
    "DatasetCorpus",
    "DistillConfig",
    "LoraConfig",
    "PathCorpus",
    "SourceTags",
    "DecodeConfig",
    "GREEDY_SEARCH",
    "HardAttentionConfig",
    "ModelConfig",
    "OptimizerConfig",
    "PositionType",
    "ScheduleConfig",
    "Stopping",
    "SelfAttentionConfig",
    "SubwordSamplingConfig",
    "TokenizerConfig",
    "TrainConfig",
    "apply_override",
    "config_differences",
    "config_from_dict",
    "corpus_name",
    "corpus_path",
    "metric_of",
    "pair_name",
    "target_tag",
    "describe_corpus",
    "describe_validation_error",
    "flatten",
    "load_config",
    "parse_duration",
    "read_yaml",
    "validation_metrics",
]
