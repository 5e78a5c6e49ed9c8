"""Op definitions, one file per family; importing them fills the op table."""
