"""The environments behind one interface (``base``), by name (``registry``): LifelongAgentBench's DB, OS and KG."""
