"""configs/defaults.yaml and README's configuration table are generated from paddle_ngraph.Config
(tools/gen_config_docs.py) and up to date."""
import importlib.util
import os

import yaml

from paddle_ngraph import Config
from paddle_ngraph.config import KEYS, validate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_config_docs", os.path.join(ROOT, "tools", "gen_config_docs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = load_generator()


def test_defaults_yaml_and_readme_table_are_up_to_date(capsys):
    assert gen.main(["--check"]) == 0, \
        "configs/defaults.yaml or README's table is stale: run python tools/gen_config_docs.py"


def test_the_yaml_holds_every_default_under_its_documentation():
    text = open(os.path.join(ROOT, "configs", "defaults.yaml"), encoding="utf-8").read()
    assert validate(yaml.safe_load(text), "defaults.yaml") == Config().as_dict()  # a YAML list reads as the tuple
    lines = text.splitlines()
    for key in KEYS:
        index = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
        assert lines[index - 1].startswith("#"), f"{key} has no comment above it"


def test_check_fails_on_a_stale_or_missing_file(tmp_path, capsys):
    yaml_file, readme = tmp_path / "defaults.yaml", tmp_path / "README.md"
    readme.write_text(f"intro\n{gen.TABLE_START}\nold table\n{gen.TABLE_END}\nrest\n", encoding="utf-8")
    args = ["--yaml", str(yaml_file), "--readme", str(readme)]
    assert gen.main(["--check"] + args) == 1  # missing yaml, stale table
    assert gen.main(args) == 0
    assert gen.main(["--check"] + args) == 0
    assert readme.read_text().startswith("intro\n" + gen.TABLE_START) and readme.read_text().endswith("rest\n")
    yaml_file.write_text(yaml_file.read_text().replace("bucket_mb: 32", "bucket_mb: 16"))
    assert gen.main(["--check"] + args) == 1
    readme.write_text("no markers\n")
    assert gen.main(["--check"] + args) == 1
