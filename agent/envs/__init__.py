"""The three LifelongAgentBench environments behind one interface (see ``base``)."""
