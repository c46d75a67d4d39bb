"""Model families at run time: what differs between a text (T5) export and a speech (Whisper) export."""
