"""The lowest layer: records, the Processor API protocols, serdes, configuration and errors."""
