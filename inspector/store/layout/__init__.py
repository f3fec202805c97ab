"""How bodies and header lists are laid out in the file so each distinct byte is stored once."""
