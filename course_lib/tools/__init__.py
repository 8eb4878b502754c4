"""The course's build tooling, apart from the library: the book build (:mod:`.book`), notebook
housekeeping (:mod:`.notebooks`) and the training benchmark (:mod:`.bench`). Tools may import any
part of course_lib; nothing in the ML floors (data, nn, models, objectives, train, recipes,
analysis, studies, widgets) imports a tool."""
