"""A bare Hydra app with a config of the same size as unirl's composed recipe: the start-up baseline."""

import hydra
from omegaconf import OmegaConf


@hydra.main(version_base="1.3", config_path=".", config_name="config")
def app(cfg) -> None:
    print(OmegaConf.to_yaml(cfg))


if __name__ == "__main__":
    app()
