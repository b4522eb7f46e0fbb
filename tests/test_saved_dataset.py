import pytest
from datasets import Dataset, DatasetDict

from ludic_core.saved_dataset import load_saved_dataset

ROWS = [{"q": "a"}, {"q": "b"}]


def test_a_dataset_or_a_named_split_loads(tmp_path):
    Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "ds"))
    assert load_saved_dataset(tmp_path / "ds")["q"] == ["a", "b"]
    DatasetDict({"train": Dataset.from_list(ROWS), "test": Dataset.from_list(ROWS[:1])}).save_to_disk(
        str(tmp_path / "dd"))
    assert load_saved_dataset(str(tmp_path / "dd"), split="test")["q"] == ["a"]


def test_every_refusal_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no datasets.save_to_disk directory at .*nowhere"):
        load_saved_dataset(tmp_path / "nowhere")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="plain is a directory but not a datasets.save_to_disk dataset"):
        load_saved_dataset(tmp_path / "plain")
    DatasetDict({"train": Dataset.from_list(ROWS)}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ValueError, match=r"dd holds splits \['train'\]; pass one split's directory .*dd/train"):
        load_saved_dataset(tmp_path / "dd")
    with pytest.raises(ValueError, match=r"dd has no split 'test'; its splits are \['train'\]"):
        load_saved_dataset(tmp_path / "dd", split="test")
    Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(ValueError, match="ds holds a single dataset, not a DatasetDict with a split 'train'"):
        load_saved_dataset(tmp_path / "ds", split="train")
    Dataset.from_list(ROWS).filter(lambda row: False).save_to_disk(str(tmp_path / "none"))
    with pytest.raises(ValueError, match=r"none: the dataset has no rows \(nothing was kept\)"):
        load_saved_dataset(tmp_path / "none", if_empty="nothing was kept")
