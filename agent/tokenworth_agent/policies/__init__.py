"""Memory policies behind one interface (see ``base``)."""
