int tasks_omp_placeholder;
