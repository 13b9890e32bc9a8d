"""Making tensors: factories from data and shapes, random sampling, legacy typed constructors."""
