"""The options tree (TrainConfig), config files, and the registry that stage families, agents and env families declare into. Imports nothing else of the package."""
